"""Reward functions that fail: bounded calls, retries of transient errors, unscored rows kept out of the update.

A reward function may call a judge model over HTTP, a code sandbox or a verifier that runs for minutes. Each call
of a reward function that is not a reward model goes through `guarded` (the timeout and the retries,
`transient.is_transient` deciding what is retried); `ledger.ScoringLedger` counts what happened per function, and at
the end of each scoring turns the rows a call could not score into unscored rows (`unscored_rows`), which leave the
update as dropped rows do (invariants I3 / I6), and stops a run whose function keeps failing.
"""
