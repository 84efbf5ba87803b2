# Prints what a worker can observe of how it was started as one JSON object (probe_core.py), run as `-m probe_pkg.main`.
from . import probe_sibling  # relative import: __package__ is set by -m
from probe_core import run  # sys.path[0] is the working directory


class Picklable:
    pass


if __name__ == "__main__":
    run(globals(), probe_sibling.WHO, Picklable)
