"""The inputs: answer spans, steps, encoding prompt/response pairs into a ScoringBatch."""
