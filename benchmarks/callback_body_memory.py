"""The security review's M2 reproduction: N concurrent unsigned callback bodies against one
`awa serve` process, and that process's memory (resident set, peak) before and after.

    python -m benchmarks.callback_body_memory --concurrency 120 --mib 8
    python -m benchmarks.callback_body_memory --concurrency 120 --mib 8 --forged-signature

The server is the real ASGI app on uvicorn in a child process, bound to 127.0.0.1 on a free
port; no database is needed (an unsigned request never reaches it). ``--forged-signature``
sends well-formed but wrong ``Awa-Timestamp``/``Awa-Signature`` headers, so the body is read
(up to ``[serve] max_body``) before the signature fails. ``--src DIR`` runs another checkout's
``awa_cli`` (e.g. an exported copy of an older commit) to measure it the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid

SERVER = """
import sys, uvicorn
from awa_cli.client import AsyncClient
from awa_cli.serve.app import ServeSettings, build_app
import awa_cli
print("awa_cli from", awa_cli.__file__, file=sys.stderr)
app = build_app(AsyncClient("postgresql://unused@127.0.0.1:1/unused"),
                ServeSettings(callback_keys=[b"bench-callback-key-0123456789"]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, value = line.split(":", 1)
                out[name] = int(value.split()[0])
    return out


async def one_request(port: int, size: int, forged: bool) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = [
        f"POST /callbacks/{uuid.uuid4()}/complete HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Content-Length: {size}",
    ]
    if forged:
        head += [f"Awa-Timestamp: {int(time.time())}", "Awa-Signature: v2=" + "0" * 64]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    chunk = b"x" * 65536
    try:
        sent = 0
        while sent < size:
            writer.write(chunk[: size - sent])
            sent += len(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass  # the server answered early and closed: the point of the fix
    try:
        status_line = await asyncio.wait_for(reader.readline(), 30)
    except (ConnectionError, OSError, TimeoutError):
        status_line = b""
    writer.close()
    parts = status_line.split()
    return int(parts[1]) if len(parts) > 1 else 0


async def load(port: int, pid: int, concurrency: int, size: int, forged: bool) -> dict[str, object]:
    peak = 0
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, memory_kib(pid)["VmRSS"])
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    statuses = await asyncio.gather(*(one_request(port, size, forged) for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    done.set()
    await sampler
    counts: dict[int, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return {"seconds": round(elapsed, 2), "statuses": counts, "rss_peak_mib": peak // 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=120)
    parser.add_argument("--mib", type=float, default=8.0)
    parser.add_argument("--forged-signature", action="store_true")
    parser.add_argument("--src", help="a directory whose awa_cli to run instead of this one")
    args = parser.parse_args()
    port = free_port()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.src or here)}
    # cwd "/": `python -c` puts the working directory first on sys.path
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env, cwd="/")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the server did not start") from None
                time.sleep(0.1)
        before = memory_kib(server.pid)
        size = int(args.mib * 1024 * 1024)
        result = asyncio.run(load(port, server.pid, args.concurrency, size, args.forged_signature))
        after = memory_kib(server.pid)
        print(
            json.dumps(
                {
                    "concurrency": args.concurrency,
                    "body_mib": args.mib,
                    "forged_signature": args.forged_signature,
                    "rss_before_mib": before["VmRSS"] // 1024,
                    **result,
                    "rss_after_mib": after["VmRSS"] // 1024,
                    "rss_high_water_mib": after["VmHWM"] // 1024,
                }
            )
        )
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
