"""One module per `maxent-grpo` subcommand, each with ``run(argv) -> int`` (dispatched by `maxent_grpo.cli.main`)."""
