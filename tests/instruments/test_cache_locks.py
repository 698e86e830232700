"""An instrument cache's writer lock: taken on its first write, its file deleted when the
`oar recall` command ends (`locks_let_go`, however it ends) or the process ends (at exit), so
that no `.lock` is left beside a cache a clean run wrote; a lock held before the command
stays held."""
import subprocess
import sys
import textwrap

import pytest

from oar_attrib.instruments.cache import OracleCache, locks_let_go
from oar_attrib.store.errors import WriterBusyError
from oar_attrib.store.lock import WriterLock


def test_a_commands_cache_locks_are_let_go_however_it_ends(tmp_path):
    kept = OracleCache(tmp_path / "kept.jsonl")
    kept.put("answer", "k", {"text": "held before"})
    with pytest.raises(KeyboardInterrupt), locks_let_go():
        inner = OracleCache(tmp_path / "inner.jsonl")
        inner.put("answer", "a", {"text": "one"})
        assert (tmp_path / "inner.jsonl.lock").exists()
        raise KeyboardInterrupt
    assert not (tmp_path / "inner.jsonl.lock").exists()
    WriterLock(tmp_path / "inner.jsonl").release()  # free for another writer
    with pytest.raises(WriterBusyError):
        WriterLock(tmp_path / "kept.jsonl")  # the cache opened before the command still holds its lock
    inner.put("answer", "b", {"text": "two"})  # a write after takes the lock again
    assert (tmp_path / "inner.jsonl.lock").exists()
    inner.release()
    kept.release()
    assert list(tmp_path.glob("*.lock")) == []
    assert [e["text"] for e in OracleCache(tmp_path / "inner.jsonl").entries()] == ["one", "two"]


def test_the_process_end_deletes_the_lock_file(tmp_path):
    script = textwrap.dedent(f"""
        from oar_attrib.instruments.cache import OracleCache
        cache = OracleCache({str(tmp_path / "c.jsonl")!r})
        cache.put("answer", "a", {{"text": "kept"}})
    """)
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.jsonl").exists() and not (tmp_path / "c.jsonl.lock").exists()
