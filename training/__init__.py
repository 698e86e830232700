"""Training for oar-attrib: SFT of the bundled arithmetic model and reshaped GRPO."""
