"""The model card a training run saves: TRL's card, with the base model and the OAR settings.

TRL writes "fine-tuned version of [None]" whenever the base model is a local folder (it links
only Hub ids) and "trained with GRPO" without a word on reshaping; `oar_model_card` fills both
in, so that a saved checkpoint says what it was trained from and how.
"""
from __future__ import annotations

import os
import re

from oar_attrib.methods import method_spec

OAR_CARD_HEADING = "## Outcome-grounded Advantage Reshaping (OAR)"


def base_model_name(model) -> str | None:
    """The name or folder the policy was loaded from (`config.name_or_path`), if any."""
    name = getattr(getattr(model, "config", None), "name_or_path", None)
    return str(name) if name else None


def oar_settings(args) -> dict:
    """The reshaping settings of an OARConfig: every oar_* field and the answer format."""
    fields = {k: v for k, v in vars(args).items() if k.startswith("oar_")}
    return {**fields, "answer_format": args.answer_format, "answer_pattern": args.answer_pattern}


def oar_model_card(card: str, base_model: str | None, args) -> str:
    """TRL's card text with the base model named and a section listing the OAR settings."""
    if base_model:
        where = "a local checkpoint" if os.path.isdir(base_model) else "a Hub model"
        named = f"`{base_model}` ({where})"
    else:
        named = "a model built in code (its config records no name or folder)"
    card = card.replace("[None](https://huggingface.co/None)", named)
    card = card.replace('model="None"', f'model="{args.output_dir}"')
    method = args.oar_method
    reshaping = (f"plain GRPO (oar_method={method!r}: advantages not reshaped)" if method_spec(method).uniform else
                 f"token advantages A_i * w_t from {method} importances, probe {args.oar_probe}")
    lines = [OAR_CARD_HEADING, "", f"Trained with `oar_attrib.training.OARGRPOTrainer`: {reshaping}.",
             "", "| setting | value |", "|---|---|"]
    lines += [f"| `{k}` | `{v}` |" for k, v in oar_settings(args).items()]
    lines.append(f"| base model | `{base_model}` |")
    section = "\n".join(lines) + "\n"
    if OAR_CARD_HEADING in card:  # a card written at an earlier checkpoint
        card = card[: card.index(OAR_CARD_HEADING)].rstrip("\n") + "\n"
    anchor = re.search(r"^### Framework versions", card, flags=re.M)
    if anchor is None:
        return card.rstrip("\n") + "\n\n" + section
    return card[: anchor.start()] + section + "\n" + card[anchor.start():]
