# streamvid demo in a container: the web assistant, with the bundled model, installed the README's way.
#
# CPU image (the default target):
#   docker build -t streamvid .
#   docker run --rm -p 127.0.0.1:7860:7860 -e STREAMVID_AUTH=me:a-long-password streamvid
#   # then open http://127.0.0.1:7860 and log in as me
#
# GPU image (NVIDIA driver and the NVIDIA container toolkit on the host):
#   docker build --target gpu -t streamvid:gpu .
#   docker run --rm --gpus all -p 127.0.0.1:7860:7860 -e STREAMVID_AUTH=me:a-long-password streamvid:gpu
#
# Inside the container the server binds 0.0.0.0 (so the published port reaches it), and `streamvid demo` refuses
# to do that without a login: STREAMVID_AUTH=USER:PASS is required. Publish the port on 127.0.0.1 as above unless
# the page is meant for other machines. Extra arguments go after the image name, e.g.
#   docker run ... streamvid streamvid demo --host 0.0.0.0 --model /models/Qwen2.5-VL-3B-Instruct
# with the checkpoint mounted (-v /path/on/host:/models:ro), or an HF id when the container has network.

ARG CUDA_BASE=nvidia/cuda:12.8.1-base-ubuntu24.04
# the CPU image's base, and where its CPU build of torch comes from (a machine without Docker Hub or the PyTorch index
# passes a locally made base and PyPI: docs/operations.md, "Building the image without Docker")
ARG CPU_BASE=python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu

# ---- GPU: CUDA base image; torch's wheel from PyPI brings its CUDA libraries --------------------------------
FROM ${CUDA_BASE} AS gpu
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 GRADIO_ANALYTICS_ENABLED=False
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY . /app
RUN pip install -e . -c constraints.txt && useradd --create-home streamvid
USER streamvid
EXPOSE 7860
CMD ["streamvid", "demo", "--host", "0.0.0.0", "--port", "7860", "--device", "cuda"]

# ---- CPU (default): the CPU build of the pinned torch/torchvision pair, then the package -------------------
FROM ${CPU_BASE} AS cpu
ARG TORCH_INDEX
ENV PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1 GRADIO_ANALYTICS_ENABLED=False
# a virtual environment from the base's python3, so the same lines work on python:3.11-slim and on a plain Debian
# base (python3 and python3-venv, no `pip` or `python` on the PATH)
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY constraints.txt /app/
# the CPU wheels of the tested torch / torchvision pair in constraints.txt (PyPI's default torch wheel carries CUDA
# libraries, ~5 GB); every other pin comes from PyPI in the next step
RUN pip install --index-url "${TORCH_INDEX}" $(grep -E '^torch(vision)?==' constraints.txt)
COPY . /app
RUN pip install -e . -c constraints.txt && useradd --create-home streamvid
USER streamvid
EXPOSE 7860
CMD ["streamvid", "demo", "--host", "0.0.0.0", "--port", "7860"]
