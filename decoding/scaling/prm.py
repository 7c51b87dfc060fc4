"""Hub process reward models (PRMs) as a `decoding.scaling.rewards.Reward`, for hosts with internet.

Qwen2.5-Math-PRM (Zhang et al. 2025, "The Lessons of Developing Process Reward Models in
Mathematical Reasoning"): the question is the user turn, the steps are the assistant turn with a
separator token `<extra_0>` after every step, and the model's two-class head gives, at each
separator, P(step is correct) = softmax(logits)[1]. The newest step's probability is the reward,
as Puri et al. 2025 use a PRM's last-step score to weight particles.

Loaded through `decoding.models.load_hub_auxiliary` (allow-listed `trust_remote_code`).
"""

from __future__ import annotations

import torch

from decoding.scaling.rewards import RewardResult

STEP_SEPARATOR = "<extra_0>"
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."


def build_conversation(tokenizer, question: str, steps: list[str]) -> str:
    """The PRM's input text: system, question, then the steps each followed by the separator."""
    answer = "".join(step.strip() + STEP_SEPARATOR for step in steps)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question},
                {"role": "assistant", "content": answer}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)


def step_probabilities(logits: torch.Tensor, input_ids: torch.Tensor, separator_id: int) -> list[float]:
    """P(correct) at every separator: logits (T, 2), input_ids (T,) -> one value per step."""
    probs = torch.softmax(logits.float(), dim=-1)  # (T, 2)
    return probs[input_ids == separator_id, 1].tolist()


class HubPRM:
    """reward=prm: the newest step's P(correct) under a hub PRM."""

    name = "prm"

    def __init__(self, loaded):
        self.loaded = loaded
        self.forward_passes = 0
        self.separator_id = loaded.tokenizer.convert_tokens_to_ids(STEP_SEPARATOR)
        if self.separator_id is None or self.separator_id == loaded.tokenizer.unk_token_id:
            raise ValueError(f"{loaded.name}: its tokenizer has no {STEP_SEPARATOR} step separator; not a Qwen PRM")

    @classmethod
    def load(cls, hub_id: str) -> HubPRM:
        from decoding.models import load_hub_auxiliary

        return cls(load_hub_auxiliary(hub_id, "AutoModel"))

    @torch.inference_mode()
    def score(self, question: str, steps: list[str], final: bool) -> RewardResult:
        tokenizer, model = self.loaded.tokenizer, self.loaded.model
        text = build_conversation(tokenizer, question, steps or [""])
        ids = tokenizer(text, return_tensors="pt").input_ids.to(model.device)  # (1, T)
        logits = model(input_ids=ids)[0]  # (1, T, 2)
        self.forward_passes += 1
        values = step_probabilities(logits[0], ids[0], self.separator_id)
        value = min(max(values[-1], 0.0), 1.0) if values else 0.5
        return RewardResult(value, False, f"PRM P(correct) = {value:.3f}")
