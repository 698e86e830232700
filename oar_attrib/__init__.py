"""oar-attrib: Outcome-grounded Advantage Reshaping for reasoning LLMs."""
from .models import load_model
from .world import WorldConfig, generate_problems, oracle_spans, reward

__version__ = "0.1.0"

__all__ = ["load_model", "WorldConfig", "generate_problems", "oracle_spans", "reward"]
