"""Detok worker processes: hold each request's DecodeStream and publish text deltas."""

from detok.worker.core import MalformedBatch, Outputs, WorkerCore

__all__ = ["MalformedBatch", "Outputs", "WorkerCore"]
