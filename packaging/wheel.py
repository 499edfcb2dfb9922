"""Builds a wheel carrying the `cojoin` binary, so that `pip install cojoin-*.whl` gives a `cojoin`
command (pip copies `<name>.data/scripts/` into the environment's bin/).

Hand-built rather than by maturin: it packs the binary `make host` already built (maturin would
compile the host again with other dependency features, about 7 minutes on 2 cores), and needs only
the standard library, so it works offline. The tag is this machine's platform (e.g.
linux_x86_64): good for pip install here and on like machines, not for PyPI (which wants
manylinux, checked by auditwheel).

    python3 packaging/wheel.py target/release/cojoin host/Cargo.toml build/wheels \
        [build/plugins/order_paid_python.wasm build/plugins/order_shipped_python.wasm]

The optional components are the example plugins `cojoin demo` runs (`--topics 3` takes the
second); each is installed as `<venv>/share/cojoin/plugins/<its file name>`, where the binary looks
for it.
"""

import base64
import hashlib
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

SUMMARY = "Join Kafka topics by key and run a sandboxed WebAssembly action on every match"


def cargo_field(manifest: Path, field: str) -> str:
    """`field = "..."` of the [package] table (the one place the version is kept)."""
    package = manifest.read_text().split("[package]", 1)[1].split("\n[", 1)[0]
    found = re.search(rf'^{field}\s*=\s*"([^"]+)"', package, re.M)
    if not found:
        sys.exit(f"{manifest}: no {field} in [package]; the wheel takes its {field} from there")
    return found.group(1)


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def binary_bytes(binary: Path) -> bytes:
    """The binary without its debug line tables (most of its size: 139 MB become 32 MB), when
    `strip` is there; function names stay, so a backtrace still names the functions."""
    strip = shutil.which("strip")
    if strip is None:
        return binary.read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "cojoin"
        subprocess.run([strip, "--strip-debug", "-o", str(copy), str(binary)], check=True)
        return copy.read_bytes()


def main(binary: Path, manifest: Path, out_dir: Path, demo_plugins: list[Path]) -> Path:
    if not binary.is_file():
        sys.exit(f"{binary} not found: build it first with `make host`")
    version = cargo_field(manifest, "version")
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{platform}"
    dist = f"cojoin-{version}"
    files = {
        f"{dist}.data/scripts/cojoin": binary_bytes(binary),
        f"{dist}.dist-info/METADATA": (
            "Metadata-Version: 2.1\n"
            "Name: cojoin\n"
            f"Version: {version}\n"
            f"Summary: {SUMMARY}\n"
            "License: Apache-2.0\n"
        ).encode(),
        f"{dist}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\n"
            "Generator: cojoin packaging/wheel.py\n"
            "Root-Is-Purelib: false\n"
            f"Tag: {tag}\n"
        ).encode(),
    }
    for plugin in demo_plugins:
        if not plugin.is_file():
            sys.exit(f"{plugin} not found: build the example plugins first with `make plugins`")
        files[f"{dist}.data/data/share/cojoin/plugins/{plugin.name}"] = plugin.read_bytes()
    record = f"{dist}.dist-info/RECORD"
    lines = [record_line(p, d) for p, d in files.items()] + [f"{record},,"]
    files[record] = ("\n".join(lines) + "\n").encode()

    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{dist}-{tag}.whl"
    partial = wheel.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            # The binary must stay executable once pip has copied it into bin/.
            mode = 0o755 if path.endswith("/scripts/cojoin") else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            z.writestr(info, data)
    partial.replace(wheel)
    return wheel


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(
            "usage: wheel.py <cojoin binary> <host/Cargo.toml> <output directory> [demo plugin .wasm ...]"
        )
    plugins = [Path(p) for p in sys.argv[4:]]
    built = main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), plugins)
    size = built.stat().st_size / 1e6
    print(f"built {built} ({size:.1f} MB); install with: pip install {built}")
