"""trackio's end-of-run line for a local run says the logs stay on this machine; other output passes unchanged."""

from __future__ import annotations

import io
import sys

from maxent_grpo.cli.trackio_banner import LOCAL_LINE, TRACKIO_UPLOAD_LINE, say_local_trackio_logs_stay_local


def test_the_upload_line_is_rewritten_and_everything_else_kept(monkeypatch):
    target = io.StringIO()
    monkeypatch.setattr(sys, "stdout", target)
    say_local_trackio_logs_stay_local()
    say_local_trackio_logs_stay_local()  # a second call does not wrap twice
    print(f"* Run finished. {TRACKIO_UPLOAD_LINE}")
    print("* View dashboard by running in your terminal: trackio show")
    assert target.getvalue() == (
        f"* Run finished. {LOCAL_LINE}\n* View dashboard by running in your terminal: trackio show\n"
    )
    assert sys.stdout.getvalue() == target.getvalue()  # the stream's own attributes stay reachable
