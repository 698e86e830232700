"""A verl batch built from the bundled model, as verl's trainer holds it after the advantage
step of GRPO: response-aligned (B, T) tensors, the prompts' and responses' token ids, group
keys and rewards; and the model itself as the policy verl's actor would be (its per-token
log-probabilities and entropies), for the tests of the verl plugin (tests/training/verl_plugin and
tests/training/test_verl_step.py)."""
import torch
import torch.nn.functional as F

# (prompt, response, reward) by group: right, right with three steps, wrong; right, wrong, no
# answer span; a group of equal rewards (advantage 0: not attributed).
GROUPS = [
    [("a=4, b=7. c=a+b. find c.\n", "c=4+7=11. #### 11", 1.0),
     ("a=4, b=7. c=a+b. find c.\n", "a=4. b=7. c=a+b=4+7=11. #### 11", 1.0),
     ("a=4, b=7. c=a+b. find c.\n", "c=4+7=12. #### 12", 0.0)],
    [("a=3, b=5. c=b+a. find c.\n", "b=5. c=5+3=8. #### 8", 1.0),
     ("a=3, b=5. c=b+a. find c.\n", "c=5+3=9. so c is 9. #### 9", 0.0),
     ("a=3, b=5. c=b+a. find c.\n", "c=5+3=8", 0.0)],
    [("a=2, b=2. c=a+b. find c.\n", "c=2+2=4. #### 4", 1.0),
     ("a=2, b=2. c=a+b. find c.\n", "a=2. c=2+2=4. #### 4", 1.0)],
]
EPS = 1e-6  # verl's GRPO epsilon


def rows_of(tokenizer):
    """(prompts, responses, rewards, uids): token id lists of each row, (B,) rewards, group keys."""
    prompts, responses, rewards, uids = [], [], [], []
    for g, group in enumerate(GROUPS):
        for prompt, response, reward in group:
            prompts.append(tokenizer(prompt).input_ids)
            responses.append(tokenizer(response).input_ids)
            rewards.append(reward)
            uids.append(f"uid-{g}")
    return prompts, responses, torch.tensor(rewards), uids


def padded(responses, fill=0) -> torch.Tensor:
    """(B, T) right-padded response ids."""
    width = max(map(len, responses))
    return torch.tensor([r + [fill] * (width - len(r)) for r in responses])


def response_mask(responses) -> torch.Tensor:
    width = max(map(len, responses))
    return torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in responses])


def grpo(rewards: torch.Tensor, uids, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) GRPO advantages by hand: (r - mean) / (std + eps) per group, on the response."""
    out = torch.zeros(len(rewards))
    for uid in set(uids):
        at = torch.tensor([u == uid for u in uids])
        group = rewards[at]
        out[at] = (group - group.mean()) / (group.std() + EPS)
    return out[:, None] * mask


def forward(model, ids: list[list[int]], pad: int) -> torch.Tensor:
    """(N, W, V) float32 logits of right-padded rows."""
    width = max(map(len, ids))
    x = torch.tensor([r + [pad] * (width - len(r)) for r in ids])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in ids])
    with torch.no_grad():
        return model(x, attention_mask=attention).logits.float()


def model_policy(model, pad: int, calls: list | None = None):
    """The model as a `scoring.Policy`: column i holds log p(ids[i + 1] | ids[:i + 1]); `calls`
    collects each call's rows."""

    def policy(rows, ids):
        if calls is not None:
            calls.append(list(rows))
        logits = forward(model, ids, pad)  # (N, W, V)
        width = logits.shape[1]
        x = torch.tensor([r + [pad] * (width - len(r)) for r in ids])
        picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, x[:, 1:, None])[..., 0]
        return F.pad(picked, (0, 1))

    return policy


def response_entropies(model, prompts, responses, pad: int) -> torch.Tensor:
    """(B, T) entropy of the distribution that chose each response token, response-aligned
    (what verl's actor stores with the old log-probabilities), 0 on padding."""
    logits = forward(model, [p + r for p, r in zip(prompts, responses)], pad)
    out = torch.zeros(len(responses), max(map(len, responses)))
    for b, (p, r) in enumerate(zip(prompts, responses)):
        dist = torch.log_softmax(logits[b, len(p) - 1: len(p) + len(r) - 1], dim=-1)
        out[b, : len(r)] = -(dist.exp() * dist).sum(dim=-1)
    return out
