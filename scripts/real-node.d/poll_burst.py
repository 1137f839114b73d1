"""N device polls at once from one process (scripts/real-node's sleep step, R42).

  poll_burst.py URL N ID TOKEN [ID TOKEN ...]

URL is the Mutation's address (http://host[:port]/api/v1/namespaces/NS/mutations/NAME); the
N polls are spread over the devices given. Every connection is opened first, then every
request is written at once, so that the N are in flight together at the operator. One line a
poll: its HTTP status, the seconds from its request written to its whole answer read (the
time at the operator, as curl's time_total - time_pretransfer). One process with one event loop, not N curl processes: on two cores,
starting fifty processes at once costs more than the polls themselves.
"""

import asyncio
import sys
import time
import urllib.parse


async def connected(host, port):
    return await asyncio.open_connection(host, port)


async def answered(conn, host, path, token):
    reader, writer = conn
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
               "Refresh-Rate: 3600\r\nConnection: close\r\n\r\n").encode()
    sent = time.perf_counter()
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    await reader.readexactly(length)
    done = time.perf_counter()
    writer.close()
    status = int(head.split(b" ", 2)[1])
    return status, done - sent


async def main(url, n, devices):
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port or 80
    conns = await asyncio.gather(*(connected(host, port) for _ in range(n)))
    polls = []
    for i, conn in enumerate(conns):
        device, token = devices[i % len(devices)]
        polls.append(answered(conn, host, f"{u.path}/devices/{device}/poll", token))
    for status, answer in await asyncio.gather(*polls):
        print(f"{status} {answer:.6f}")


if __name__ == "__main__":
    if len(sys.argv) < 5 or len(sys.argv) % 2 != 1:
        sys.exit(__doc__)
    pairs = sys.argv[3:]
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), list(zip(pairs[::2], pairs[1::2]))))
