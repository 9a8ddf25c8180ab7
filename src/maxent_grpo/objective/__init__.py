"""The MaxEnt listwise objective.

- `weights`: the closed-form target weights and advantages over prompt groups (pure torch, equations (1)-(5)).
- `controllers`: the tau and beta controllers and the tau anneal (pure Python).
- `listwise`: the objective over a typed rollout batch (`RolloutBatch` -> `ListwiseStep`), no trainer.
- `mode_keys`: answer extractors that group completions into modes; `mode_probability`: the policy's mode
  probabilities; `sequence_logps`: the sampling policy's log-probability of each completion.
"""
