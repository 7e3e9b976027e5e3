"""Stage 5, on the workers: the worker contract, what a compiled task carries and the functions workers run.

``compile`` builds tasks that call the functions here; ``execute`` registers
the device runtime that makes them work on each worker. Both sides depend on
this package and on nothing of each other. It imports no ``distributed``:
the worker plugin (``execute``) hands it the worker lookup (:func:`bind`)
and the courier that sends values between workers (:func:`bind_courier`)
when it installs a device's :class:`Runtime` on a worker.

* :mod:`.resources`: how a task asks for its device, what a worker offers.
* :mod:`.device`: one op (:class:`OpTask`, :func:`run_op`), moves, control
  tokens, the device runtime and its records.
* :mod:`.calls`: what the client runs on every worker (saves committed or
  discarded, aborts, links opened, records drained).
* :mod:`.partition_task`: a device partition, several ops in one task
  (:class:`PartitionTask`, :func:`run_partition`).
* :mod:`.usercode`: the spec's folder as the working directory of user
  code (a lease shared by the calls of one folder), and the user's frames
  of an error.
* :mod:`.windows`, :mod:`.links`, :mod:`.frames` and :mod:`.exchange`: one device's part of a
  loop window (:class:`WindowTask`, :func:`run_window`), with values sent
  worker to worker over direct links (or Dask's comms on TLS clusters).
"""

from .exchange import Mailbox, Sent, Tag, bind_courier
from .frames import SECRET_BYTES as LINK_SECRET_BYTES
from .partition_task import PartitionTask, run_partition
from .resources import device_resource, resources_for, slot_resources, task_resource, worker_resources
from .calls import SEATS_ATTRIBUTE, seats, abort_loop, abort_run, commit_saves, device_metrics, discard_saves, drain_records, open_links, set_links, settle_saves
from .device import (COPY_TOPIC, DEVICE_METRIC, DEVICE_TOPIC, DRAIN_TOPIC, LOG_TOPIC, RUNTIME_ATTRIBUTE, Runtime, bind, copy_failed,
                     mark_lost, move, run_op, to_host, token)
from .tasks import OpTask
from .windows import ARG, LOCAL, RECEIVED, STATE, StateRule, WindowTask, run_window
from .groups import GroupTask, run_group

__all__ = ["ARG", "COPY_TOPIC", "DEVICE_METRIC", "DEVICE_TOPIC", "DRAIN_TOPIC", "LINK_SECRET_BYTES", "LOCAL", "LOG_TOPIC", "RECEIVED", "RUNTIME_ATTRIBUTE", "SEATS_ATTRIBUTE", "STATE", "Mailbox", "OpTask", "Sent", "Tag", "PartitionTask",
           "Runtime", "StateRule", "WindowTask", "GroupTask", "run_group", "abort_loop", "abort_run", "bind", "bind_courier", "commit_saves",
           "copy_failed", "device_resource",
           "discard_saves", "mark_lost", "settle_saves",
           "device_metrics", "drain_records", "move", "open_links", "resources_for", "set_links", "slot_resources", "run_op", "run_partition", "run_window", "task_resource",
           "to_host", "token", "worker_resources", "seats"]
