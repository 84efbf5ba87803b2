# Prints what a worker can observe of how it was started as one JSON object (probe_core.py), run as a script.
import probe_sibling  # found through sys.path[0], the script's directory
from probe_core import run


class Picklable:
    pass


if __name__ == "__main__":
    run(globals(), probe_sibling.WHO, Picklable)
