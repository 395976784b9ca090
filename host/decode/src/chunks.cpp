#include "chunks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace kt {

Chunks chunks_of(const PtStreams& pt, const DecodeOptions& options) {
  Chunks out;
  out.streams = &pt;
  for (const auto& [cpu, data] : pt) {
    if (options.cpu && cpu != *options.cpu) continue;
    std::vector<Piece> chunk;
    uint64_t chunk_size = 0;
    for (const Piece& p : split_at_psb(cpu, data)) {
      chunk.push_back(p);
      chunk_size += p.end - p.begin;
      out.bytes += p.end - p.begin;
      if (chunk_size >= options.chunk_bytes) {
        out.runs.push_back(std::move(chunk));
        chunk.clear();
        chunk_size = 0;
      }
    }
    if (!chunk.empty()) out.runs.push_back(std::move(chunk));
  }
  std::stable_sort(out.runs.begin(), out.runs.end(),
                   [](const auto& a, const auto& b) { return a.front().time < b.front().time; });
  return out;
}

unsigned threads_for(const Chunks& chunks, const DecodeOptions& options) {
  unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, chunks.runs.size())));
}

Status for_each_piece(const Chunks& chunks, unsigned threads, const DecodeOptions& options,
                      const std::function<Status(unsigned, const Piece&)>& work) {
  std::atomic<size_t> next_chunk{0};
  std::atomic<uint64_t> done_bytes{0};
  std::vector<Status> results(threads);
  std::mutex m;
  std::condition_variable cv;
  unsigned finished = 0;
  auto run = [&](unsigned t) {
    for (;;) {
      const size_t c = next_chunk.fetch_add(1);
      if (c >= chunks.runs.size()) break;
      for (const Piece& p : chunks.runs[c]) {
        auto st = work(t, p);
        if (!st) {
          results[t] = st;
          next_chunk = chunks.runs.size();
          break;
        }
        done_bytes += p.end - p.begin;
        chunks.streams->at(p.cpu).release(p.begin, p.end);
      }
    }
    std::lock_guard<std::mutex> g(m);
    ++finished;
    cv.notify_all();
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(run, t);
  if (options.progress) {
    // The calling thread reports progress and leaves decoding to the pool
    // plus one more worker, so that reports stay regular.
    pool.emplace_back(run, 0);
    std::unique_lock<std::mutex> lk(m);
    while (finished < threads) {
      cv.wait_for(lk, std::chrono::milliseconds(200));
      options.progress(done_bytes.load(), chunks.bytes);
    }
  } else {
    run(0);
  }
  for (auto& th : pool) th.join();
  for (auto& st : results)
    if (!st) return st.error();
  return ok_status();
}

}  // namespace kt
