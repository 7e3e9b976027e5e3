"""Beside the stages, the cache (a sibling of compile, below execute): values of ops and loops on disk.

Each value is kept under a key of what made it (``store``).

Other stages use it through this package: ``execute`` opens it for a run
(``execute.caching``) and writes loops' checkpoints (``checkpoints``), ``api``
lists and clears both (``checkpoint_files``), and checks a run's cache
settings and checkpoint folders before anything starts.
"""

from .checkpoint_files import Entry, Listing, remove, scan
from .settings import CacheSettings, check_checkpoint_paths, check_settings, directory_problem
from .keys import Key, Keys, compute_keys, module_file, why_again
from .store import FORMAT, Cache, default_directory, ref_of

__all__ = ["FORMAT", "Cache", "CacheSettings", "Entry", "Key", "Keys", "Listing", "check_checkpoint_paths",
           "check_settings", "compute_keys", "default_directory", "directory_problem", "module_file", "ref_of",
           "remove", "scan", "why_again"]
