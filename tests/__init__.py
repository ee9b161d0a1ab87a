"""The test suite (fixtures in conftest.py, helpers in support.py).

Compiled modules are kept (in __pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE
is set, as in some CI images: otherwise every xdist worker rewrites and compiles every test
module again (7 of its 12 s of collecting) and every `python app.py` or command-line process a
test starts compiles the package again (0.3 to 0.5 s of CPU each). This package is imported
before conftest.py and before any module of the package under test.
"""

import os
import sys

sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
