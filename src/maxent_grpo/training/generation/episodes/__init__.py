"""Tool-calling episodes: one completion slot each, every turn generated through the trainer's backend.

- `backend`: `EpisodeBackend`, the `GenerationBackend` that runs an episode's turns and leaves a failed episode out
  of its group (a missing slot the generation step retries, then drops);
- `tool_calls`: parsing the model's tool calls and running them under TRL's tool-error policy;
- `environments`: the per-slot environment pool (``reset`` per episode, the environment's methods as tools);
- `bounded_call`: the time limit on one tool or environment call;
- `failure`: `EpisodeFailed`, why an episode cannot count;
- `trainer_setup`: the episodes' settings and environment pool, read from what TRL's ``GRPOTrainer.__init__``
  prepared;
- `metrics`: the step's tool metrics and failed episodes by cause.

What a finished episode leaves for reward functions and metrics, `EpisodeTrace`, is part of the backend contract
(`contract.episode_trace`).
"""
