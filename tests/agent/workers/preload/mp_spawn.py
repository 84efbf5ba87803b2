# multiprocessing's spawn start method re-imports __main__ from its __file__ in a fresh interpreter: a preloaded
# worker's __main__ must be found there as a cold worker's is.
import multiprocessing as mp
import os


def square(x):
    return x * x


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2) as pool:
        print(sum(pool.map(square, range(10))), os.environ.get("RANK"), flush=True)
