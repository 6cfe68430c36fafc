"""Checks of a protocol run for the tests of any estimator (see :func:`check_protocol`)."""

from ._protocol_checks import (
    RecordingRuntime,
    check_protocol,
    recording_runtime,
    remove_self_masks,
)

__all__ = ["RecordingRuntime", "check_protocol", "recording_runtime", "remove_self_masks"]
