"""10,000 forward queries for the large-batch measurements (written to runs/big10k.csv, ignored by
git): the first 10,000 USPTO-MIT test sources, every tenth row replaced by a hostile one."""
import gzip
import random

import pandas as pd

rng = random.Random(0)
with gzip.open("../shared/data/uspto_mit/derived/src-test.mixed.txt.gz", "rt") as f:
    sources = [line.strip() for _, line in zip(range(10_000), f)]
hostile = ["xyz", "C1CC", "", "=HYPERLINK(\"http://x\")", "C" * 2500, "c1ccccc1>>CCO", "CC[Zz]", "\u00e9\u00e9"]
rows = [rng.choice(hostile) if i % 10 == 3 else sources[i] for i in range(10_000)]
pd.DataFrame({"smiles": rows}).to_csv("runs/big10k.csv", index=False)
print(len(rows))
