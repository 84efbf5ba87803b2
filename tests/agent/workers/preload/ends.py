# How a worker ends, chosen by argv[1]: compared between cold and preloaded starts.
import sys


def inner():
    raise ValueError("raised by the worker")


if __name__ == "__main__":
    how = sys.argv[1]
    if how == "code":
        sys.exit(3)
    if how == "message":
        sys.exit("a message to stderr")
    if how == "raise":
        inner()
    if how == "syntax":
        compile("def (", "<generated>", "exec")
    if how == "record":
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            inner()

        main()
    print("fell through", flush=True)
