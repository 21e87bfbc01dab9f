#!/usr/bin/env bash
# The wheels benchmarks/train_gpu.sh needs on a GPU machine without network, downloaded into .whl/ (run here, with PyPI).
# That machine has torch (CUDA), transformers, peft, accelerate, numpy and safetensors, not v1's own pure-Python
# dependencies: v1.train imports pydantic, docstring-parser, rich and (through v1.inference) aiohttp. The list is what
# benchmarks/train_gpu.py imports beyond those (found by blocking imports one by one), and typing-extensions and idna (pydantic-core
# needs a newer typing-extensions than torch may bring; yarl needs idna), and transformers at the version pyproject.toml
# pins (the machine's may be older); --no-deps: each is named. The second group was found by listing the
# distributions a `v1 train` of configs/train/tiny_first_letter.toml had imported, less the machine's.
# Usage: bash benchmarks/gpu_wheels.sh   (then carry .whl/ to the machine; .gitignore lists it)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
    pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0 typing-inspection==0.4.2
    docstring-parser==0.18.0 rich==15.0.0 pygments==2.20.0 markdown-it-py==4.3.0 mdurl==0.1.2
    aiohttp==3.14.5 multidict==7.2.1 yarl==1.25.1 propcache==0.5.4 frozenlist==1.8.0 aiosignal==1.4.0
    aiohappyeyeballs==2.7.1 attrs==26.1.0 typing-extensions==4.16.0 idna==3.20
    transformers==5.19.0
    # and what `v1 train` (the tiny recipe: the eval path's clients and taskset loading) imports beyond those
    openai==3.57.0 jiter==0.19.0 sniffio==1.3.1 google-genai==3.6.1 google-auth==2.63.0 boto3==1.43.11
    botocore==1.43.11 s3transfer==0.17.0 jmespath==1.1.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
    pytz==2026.6 pydantic-settings==2.14.1 python-dotenv==1.2.2 trio==0.22.2 outcome==1.3.0.post0
    truststore==0.10.5 wcwidth==0.7.0 httpx2==2.16.2 httpcore2==2.16.2
)
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
ls .whl | wc -l | xargs echo "wheels:"
du -sh .whl
