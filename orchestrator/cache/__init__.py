"""The cache: values of ops and of whole loops on disk, keyed by what made them (``store``).

Other stages use it through this package: ``execute`` opens it for a run
(``execute.caching``), ``api`` lists and clears it, and checks a run's cache
settings before anything starts.
"""

from .settings import CacheSettings, check_settings, directory_problem
from .store import FORMAT, Cache, Key, Keys, compute_keys, default_directory, module_file, ref_of, why_again

__all__ = ["FORMAT", "Cache", "CacheSettings", "Key", "Keys", "check_settings", "compute_keys", "default_directory",
           "directory_problem", "module_file", "ref_of", "why_again"]
