"""One module per `maxent-grpo` subcommand, each with a ``SUMMARY`` line and ``run(argv) -> int``
(dispatched by `maxent_grpo.cli.main`)."""
