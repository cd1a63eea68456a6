"""Suite-wide settings.

Property-based tests draw the same inputs on every run, so that a CI run cannot fail
on a draw that the run before it never made; ``bench/fuzz.py`` explores at random
(set ``NEREUS_RANDOM_PROPERTIES=1`` to do the same here).
"""

import os

from hypothesis import settings

settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", database=None)
settings.load_profile("explore" if os.environ.get("NEREUS_RANDOM_PROPERTIES") else "suite")
