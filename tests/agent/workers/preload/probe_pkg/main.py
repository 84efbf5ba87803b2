# Prints what a worker can observe of how it was started as one JSON object (probe_core.describe), run as `-m probe_pkg.main`.
import json
import random

from . import probe_sibling  # relative import: __package__ is set by -m
from probe_core import describe  # sys.path[0] is the working directory


class Picklable:
    pass


if __name__ == "__main__":
    d = describe(globals(), probe_sibling.WHO, Picklable)
    d["random"] = random.random()  # differs between workers; compared separately
    print(json.dumps(d, sort_keys=True))
