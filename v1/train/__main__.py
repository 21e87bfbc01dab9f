"""``python -m v1.train CONFIG [options]`` is ``v1 train``, in the form torchrun launches.

torchrun --nproc-per-node 4 -m v1.train configs/train/my_run.toml
"""

import sys

from v1.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
