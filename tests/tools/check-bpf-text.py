#!/usr/bin/env python3
"""Checks a kthost bundle's BPF text against the guest kernel's own view.

  check-bpf-text.py BUNDLE PROBE_OUT [--json]

PROBE_OUT is what `ktprobe bpf-stress --out FILE` wrote inside the guest: one
line per program, "prog <index> <id> <kind> 0x<addr> <len> <hex>", the JIT
bytes the guest kernel returned for BPF_OBJ_GET_INFO_BY_FD (jited_prog_insns).
BUNDLE/text.kts is parsed here from its documented layout
(host/textstore/include/kthost/textstore/text_store.h), sharing no code with
kthost. Every program must be covered by a saved record (a load copy or a
guard copy) whose bytes equal the kernel's; exit status 0 when all are, 1
when any is missing or differs, 2 on unreadable input.
"""
import json
import struct
import sys

HEADER = b"KTTEXT\x00\x01"
RECORD_MAGIC = 0x5254544B
FIXED = 44
MAX_DATA = 64 << 20
MAX_NAME = 1024


def crc32c(data):
    crc = 0xFFFFFFFF
    table = crc32c.table
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


crc32c.table = _table()
SOURCES = {1: "snapshot", 2: "guard", 3: "unregister", 4: "load"}


def read_text_store(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != HEADER:
        raise ValueError(f"{path}: not a text store (header {data[:8]!r})")
    records, off = [], 16
    while off + FIXED + 4 <= len(data):
        magic, rlen, time, start, dlen, source, kind, rid, nlen, _ = struct.unpack_from("<IIQQIHHQHH", data, off)
        if magic != RECORD_MAGIC:
            raise ValueError(f"{path}: offset {off}: bad record magic 0x{magic:08x}")
        if dlen > MAX_DATA or nlen > MAX_NAME or rlen != FIXED + nlen + dlen + 4:
            raise ValueError(f"{path}: offset {off}: bad lengths (record {rlen}, name {nlen}, data {dlen})")
        if off + rlen > len(data):
            break  # a partial record at the end: a writer that died
        body = data[off:off + rlen - 4]
        (crc,) = struct.unpack_from("<I", data, off + rlen - 4)
        if crc32c(body) != crc:
            raise ValueError(f"{path}: offset {off}: CRC mismatch")
        name = data[off + FIXED:off + FIXED + nlen].decode(errors="replace")
        text = data[off + FIXED + nlen:off + FIXED + nlen + dlen]
        records.append({"start": start, "bytes": text, "source": SOURCES.get(source, str(source)), "name": name})
        off += rlen
    return records


def read_probe(path):
    progs = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 7 or parts[0] != "prog":
                continue
            progs.append({"index": int(parts[1]), "id": int(parts[2]), "kind": parts[3], "addr": int(parts[4], 16),
                          "len": int(parts[5]), "bytes": bytes.fromhex(parts[6])})
    return progs


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    bundle, probe = argv[1], argv[2]
    try:
        records = read_text_store(f"{bundle}/text.kts")
        progs = read_probe(probe)
    except (OSError, ValueError, struct.error) as e:
        print(f"check-bpf-text: {e}", file=sys.stderr)
        return 2
    matched, missing, differ = 0, [], []
    for p in progs:
        covering = [r for r in records if r["start"] <= p["addr"] and p["addr"] + p["len"] <= r["start"] + len(r["bytes"])]
        if not covering:
            missing.append(p)
            continue
        if any(r["bytes"][p["addr"] - r["start"]:p["addr"] - r["start"] + p["len"]] == p["bytes"] for r in covering):
            matched += 1
        else:
            differ.append(p)
    result = {"programs": len(progs), "matched": matched, "missing": len(missing), "differ": len(differ),
              "records": len(records),
              "examples": [f"{p['kind']} #{p['index']} at 0x{p['addr']:x} ({p['len']} bytes)" for p in (missing + differ)[:5]]}
    if "--json" in argv:
        print(json.dumps(result))
    else:
        print(f"BPF text: {matched}/{len(progs)} programs equal the guest kernel's JIT bytes "
              f"({len(missing)} not saved, {len(differ)} differ; {len(records)} text records)")
        for e in result["examples"]:
            print(f"  {e}")
    return 0 if progs and matched == len(progs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
