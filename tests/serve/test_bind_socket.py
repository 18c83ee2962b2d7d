"""The listening socket: TCP_NODELAY on served connections, a backlog from the moment the URL is
announced, and --host/--port errors that name the flag."""

from __future__ import annotations

import asyncio
import errno
import socket

import pytest

from wanka.serve.server import bind_socket


def test_connections_accepted_on_the_socket_have_tcp_nodelay():
    """Without TCP_NODELAY, Nagle held every streamed chunk of a keep-alive connection for the
    client's delayed ACK (~40 ms). asyncio sets it only on sockets whose proto says TCP, which
    bind_socket makes; uvicorn serves that socket through the same asyncio server call as here."""

    async def accept_one() -> int:
        sock = bind_socket("127.0.0.1", 0)
        assert sock.proto == socket.IPPROTO_TCP
        seen = asyncio.get_running_loop().create_future()

        async def on_connection(reader, writer):
            seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connection, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            nodelay = await asyncio.wait_for(seen, 60)
            writer.close()
        return nodelay

    assert asyncio.run(accept_one()) != 0


@pytest.mark.parametrize("host,port,field", [
    ("127.0.0.1", 70000, "--port"),
    ("127.0.0.1", -1, "--port"),
    ("nosuchhost.invalid", 0, "--host"),   # RFC 6761: .invalid never resolves
])
def test_bind_socket_names_the_flag(host, port, field):
    with pytest.raises(Exception) as info:
        bind_socket(host, port)
    assert getattr(info.value, "field", None) == field


def test_an_address_not_on_this_machine_names_host(monkeypatch):
    """bind() fails with EADDRNOTAVAIL for an address no interface has; made to fail so, whatever
    this machine's interfaces are."""
    def bind(self, address):
        raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")

    monkeypatch.setattr(socket.socket, "bind", bind)
    with pytest.raises(Exception) as info:
        bind_socket("192.0.2.1", 0)   # RFC 5737 TEST-NET-1
    assert getattr(info.value, "field", None) == "--host" and "192.0.2.1" in str(info.value)


def test_port_in_use_names_port():
    first = bind_socket("127.0.0.1", 0)
    first.listen()
    try:
        with pytest.raises(Exception) as info:
            bind_socket("127.0.0.1", first.getsockname()[1])
        assert getattr(info.value, "field", None) == "--port"
    finally:
        first.close()


def test_announced_socket_accepts_connections_before_the_server_loop_starts():
    """`wanka serve --json` prints its URL right after binding; a client connecting at once must
    wait in the backlog, not be refused."""
    sock = bind_socket("127.0.0.1", 0)
    try:
        conn = socket.create_connection(sock.getsockname()[:2], timeout=30)
        conn.close()
    finally:
        sock.close()
