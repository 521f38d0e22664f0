"""Plumb's snappy output is read by another implementation (python-snappy, libsnappy)."""
import io

import snappy

from conftest import TESTDATA


def test_python_snappy_reads_our_stream():
    ours = (TESTDATA / "codecs" / "dnscap__dns.pcap.sz").read_bytes()
    out = io.BytesIO()
    snappy.stream_decompress(io.BytesIO(ours), out)
    assert out.getvalue() == (TESTDATA / "pcaps" / "dnscap__dns.pcap").read_bytes()


def test_python_snappy_reads_our_empty_stream():
    out = io.BytesIO()
    snappy.stream_decompress(io.BytesIO((TESTDATA / "codecs" / "empty.sz").read_bytes()), out)
    assert out.getvalue() == b""
