"""A worker decorated with torch's @record: rank 1 raises, its traceback lands in TORCHELASTIC_ERROR_FILE."""
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    if os.environ["RANK"] == "1":
        raise ValueError("boom from rank 1")
    time.sleep(30)


if __name__ == "__main__":
    main()
