# The chunked, sharded run of a preregistered plan, sourced by a replication's run.sh after it
# sets DIR (its folder), ARGS (the plan's command without --n and --cf-cache), WANT (the family's
# traces at which the run stops) and, optionally, LEAST (the plan's min_traces) and DEADLINE
# (seconds since the epoch after which no chunk starts).
#
# Each chunk is two shards of one command (`--shard 1/2`, `2/2`: the chosen groups of even and odd
# index, each in a cache of its own beside cache.jsonl), their caches are joined (`oar recall
# merge`, checked) and the unsharded command reads every group back from the join. Every group of
# answers, every attribution and every step boundary's continuation rewards are appended to a
# shard's cache as soon as they are made, and a rerun reads back what the caches hold. It
# analyses 4 groups (16 traces) more per chunk until the family (traces of at least --min-steps
# steps) holds WANT traces, or DEADLINE passes, then runs the analysis once (at a deadline only
# with at least LEAST traces in the family). Before the stop it keeps only counts: each chunk's
# report is read for its counts (progress.json) and deleted unread.
OAR=${OAR:-oar}
PYTHON=${PYTHON:-python3}
LEAST=${LEAST:-0}
DEADLINE=${DEADLINE:-}
SHARDS=("$DIR/cache.shard-1-of-2.jsonl" "$DIR/cache.shard-2-of-2.jsonl")
count() {  # the counts of a chunk's report, nothing else of it; the report is deleted
  $PYTHON - "$DIR" <<'PY'
import json, os, sys
folder = sys.argv[1]
report = json.load(open(f"{folder}/.chunk.json"))
keep = {"n": report["n"], "n_labelled": report["n_labelled"], "family": report["n_scored"],
        "groups": report["groups"]}
os.remove(f"{folder}/.chunk.json")
json.dump(keep, open(f"{folder}/progress.json", "w"), indent=1)
print(keep["family"])
PY
}
joined() {  # the shards' caches joined into cache.jsonl (a new file each time)
  rm -f $DIR/cache.jsonl
  $OAR recall merge $DIR/cache.jsonl "${SHARDS[@]}" >&2
}
family=0
for n in $(seq 16 16 400); do
  if [ -n "$DEADLINE" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then
    n=$((n - 16))
    echo "run: the deadline passed with $family traces in the family at $n drawn"
    [ "$family" -ge "$LEAST" ] && [ "$n" -gt 0 ] && break
    echo "run: fewer than $LEAST: no analysis; the run resumes from its caches in a later round"
    exit 0
  fi
  # each shard's own report holds outcomes of its share: it is not kept
  OMP_NUM_THREADS=1 $OAR recall advantage "${ARGS[@]}" --n $n --shard 1/2 --cf-cache $DIR/cache.jsonl --json --no-progress > /dev/null &
  first=$!
  OMP_NUM_THREADS=1 $OAR recall advantage "${ARGS[@]}" --n $n --shard 2/2 --cf-cache $DIR/cache.jsonl --json --no-progress > /dev/null &
  second=$!
  wait $first
  wait $second
  joined
  $OAR recall advantage "${ARGS[@]}" --n $n --cf-cache $DIR/cache.jsonl --json --no-progress > $DIR/.chunk.json
  family=$(count)
  echo "run: $n traces drawn, $family in the family $(date -u +%FT%TZ)"
  [ "$family" -ge "$WANT" ] && break
done
$OAR recall advantage "${ARGS[@]}" --n $n --cf-cache $DIR/cache.jsonl --json --no-progress > $DIR/replication.json.part
mv $DIR/replication.json.part $DIR/replication.json
$PYTHON -m oar_attrib.analysis.preregistered $DIR/plan.json $DIR/replication.json
