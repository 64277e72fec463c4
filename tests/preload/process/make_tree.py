"""make_tree.py ROOT SEED BYTES: a tree of files of random bytes, at least BYTES in all, the same for
the same SEED: small and large files (10 B to 3 MiB) in nested directories, as rsync meets them."""
import os
import random
import sys

root, seed, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
made = index = 0
while made < total:
    directory = os.path.join(root, "d%d" % (index % 7), "e%d" % (index % 3))
    os.makedirs(directory, exist_ok=True)
    size = rng.choice([10, 300, 4096, 70000, 1 << 20, 3 << 20])
    with open(os.path.join(directory, "f%04d" % index), "wb") as f:
        f.write(rng.randbytes(size))
    made += size
    index += 1
