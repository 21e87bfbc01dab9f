"""``python -m v1.train CONFIG [options]`` is ``v1 train``, in the form torchrun launches.

torchrun --nproc-per-node 4 -m v1.train configs/train/my_run.toml
"""

import sys

from v1.train._rank_entry import die_with_launcher, started_by_torchrun

if __name__ == "__main__":
    if started_by_torchrun():  # end with torchrun from here on (`v1 train --nproc` closes the window before `import v1` too)
        die_with_launcher()
    from v1.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
