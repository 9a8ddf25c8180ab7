"""The bottom floor of the generation step: what a backend is (`protocol`), what else the trainer may ask of one
(`capabilities`), how a completion is checked (`completion_check`), the sampling settings every backend receives
(`sampling`) and the record of a tool-calling episode (`episode_trace`). It imports nothing else of the package."""
