"""`TransformersBackend`: completions from the training model's own `generate`, through TRL's code path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from maxent_grpo.training.generation.contract.protocol import Completion, TokenPrompt

if TYPE_CHECKING:
    from trl import GRPOTrainer


class TransformersBackend:
    """Generate with the model being trained, exactly as TRL 1.16's `GRPOTrainer` does without vLLM.

    Prompts are tokenized by the trainer's `_tokenize_prompts` and sampled by its `_generate_single_turn` (left
    padding, the trainer's generation config, everything after the first EOS masked, DeepSpeed/FSDP unwrapping), so
    with the same seed and the same rows it returns token-for-token what stock `GRPOTrainer` generates. Each unique
    prompt is repeated ``counts[i]`` times in one batched `generate` call; `TokenPrompt` ids (an episode's turns) are
    generated from as they are, as TRL's tool loop does. It reuses TRL's private methods on purpose:
    they are the reference behaviour this backend must match, and TRL is pinned to 1.16.x.
    """

    def __init__(self, trainer: GRPOTrainer) -> None:
        if trainer.use_vllm:
            raise ValueError("TransformersBackend generates with the training model; the trainer has use_vllm=True.")
        self._trainer = trainer

    def generate(self, prompts: Sequence[Any], counts: Sequence[int]) -> list[list[Completion]]:
        rows = [prompt for prompt, count in zip(prompts, counts, strict=True) for _ in range(count)]
        groups: list[list[Completion]] = [[] for _ in prompts]
        trainer = self._trainer
        if not rows:
            if self._generation_is_collective():
                self._take_part_without_prompts()
            return groups
        if isinstance(rows[0], TokenPrompt):
            prompt_ids, images, multimodal_fields = [list(row.ids) for row in rows], None, {}
        else:
            prompt_ids, images, multimodal_fields = trainer._tokenize_prompts(rows)
        completion_ids, logprobs = trainer._generate_single_turn(prompt_ids, images, multimodal_fields, max(counts))
        texts = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
        row = 0
        for index, count in enumerate(counts):
            for _ in range(count):
                groups[index].append(
                    Completion(
                        text=texts[row],
                        prompt_ids=list(prompt_ids[row]),
                        completion_ids=list(completion_ids[row]),
                        logprobs=None if logprobs is None else list(logprobs[row]),
                    )
                )
                row += 1
        return groups

    def _generation_is_collective(self) -> bool:
        """Under FSDP or DeepSpeed on several processes, `generate` gathers weights and syncs every decoding step."""
        trainer = self._trainer
        sharded = trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled
        return sharded and trainer.accelerator.num_processes > 1

    def _take_part_without_prompts(self) -> None:
        """Run one throw-away generation so this process joins the collectives of the others' generation call."""
        trainer = self._trainer
        trainer._generate_single_turn([[trainer._tokenizer.pad_token_id]], None, {}, 1)
