"""The synthetic arithmetic world: seeded problems whose solutions are chains of steps
(`generator`), the structural oracle of which tokens the answer reads (`oracle`), the answers
and their reward (`answers`), the world's tokenizer and held-out evaluation of a model on it; and a natural-language world of
word problems (`words`) with its value oracle for free-text traces (`value_oracle`).

Nothing in the attribution pipeline depends on this package: it is the test bed that knows
which tokens are causal (see `oracle` for the sets).
"""
from .answers import WORLD_FORMATS, extract_answer, format_answer, reward
from .generator import NAMES, PRESETS, Operand, Problem, Step, WorldConfig, generate_problems, get_config, split_of
from .oracle import DEFAULT_SETS, FILLERS, KNOWN_SETS, SPAN_SETS, STEP_RE, Oracle, oracle_spans, shift_result
from .value_oracle import VALUE_SETS, Mention, ValueOracle, find_numbers, parse_number, value_oracle
from .words import WORD_PRESETS, Quantity, WordConfig, WordProblem, generate_word_problems, get_word_config

__all__ = ["WORLD_FORMATS", "DEFAULT_SETS", "FILLERS", "KNOWN_SETS", "NAMES", "PRESETS", "SPAN_SETS", "STEP_RE",
           "Operand", "Oracle", "Problem", "Step", "WorldConfig", "extract_answer", "format_answer",
           "generate_problems", "get_config", "oracle_spans", "reward", "shift_result", "split_of",
           "VALUE_SETS", "WORD_PRESETS", "Mention", "Quantity", "ValueOracle", "WordConfig", "WordProblem",
           "find_numbers", "generate_word_problems", "get_word_config", "parse_number", "value_oracle"]
