# Prints what a worker can observe of how it was started as one JSON object (probe_core.describe), run as a script.
import json
import random

import probe_sibling  # found through sys.path[0], the script's directory
from probe_core import describe


class Picklable:
    pass


if __name__ == "__main__":
    d = describe(globals(), probe_sibling.WHO, Picklable)
    d["random"] = random.random()  # differs between workers; compared separately
    print(json.dumps(d, sort_keys=True))
