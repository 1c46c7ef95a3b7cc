// Replays a chirp trace's writes (w) and primary reads (rp) through plain
// LevelDB, the reference for issue #17's "Strata without an index: PUT <=
// LevelDB's"; prints the mean latency of inserts (first write of a key),
// updates, all puts and gets, in microseconds. Options as LevelDB++'s runs:
// 64 MiB write buffer and block cache, 10-bit Bloom filters.
//
//   apt-get install libleveldb-dev
//   g++ -O2 -std=c++17 scripts/leveldb_replay.cc -o leveldb_replay -lleveldb
//   ./leveldb_replay TRACE.chirp DBDIR snappy|none
//
// The key of a write is its JSON "ID" field's digits, as `strata bench
// replay --format chirp` takes it (integer IDs only).
#include <leveldb/db.h>
#include <leveldb/cache.h>
#include <leveldb/filter_policy.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <unordered_set>
int main(int argc, char** argv) {
  if (argc < 4) { fprintf(stderr, "usage: replay TRACE DBDIR snappy|none\n"); return 2; }
  leveldb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = 64 << 20;
  o.block_cache = leveldb::NewLRUCache(64 << 20);
  o.filter_policy = leveldb::NewBloomFilterPolicy(10);
  o.compression = std::string(argv[3]) == "snappy" ? leveldb::kSnappyCompression : leveldb::kNoCompression;
  leveldb::DB* db;
  leveldb::Status s = leveldb::DB::Open(o, argv[2], &db);
  if (!s.ok()) { std::cerr << s.ToString() << "\n"; return 1; }
  std::ifstream in(argv[1]);
  std::string line, got;
  std::unordered_set<std::string> seen;
  double ins = 0, upd = 0, get = 0; long nins = 0, nupd = 0, nget = 0;
  leveldb::WriteOptions wo; leveldb::ReadOptions ro;
  using C = std::chrono::steady_clock;
  while (std::getline(in, line)) {
    size_t t1 = line.find('\t'); size_t t2 = line.find('\t', t1 + 1);
    std::string op = line.substr(t1 + 1, t2 - t1 - 1);
    if (op == "w") {
      std::string json = line.substr(t2 + 1);
      size_t p = json.find("\"ID\":");
      if (p == std::string::npos) { std::cerr << "a write without an integer ID: " << line << "\n"; return 1; }
      p += 5; size_t e = p;
      while (e < json.size() && json[e] >= '0' && json[e] <= '9') e++;
      std::string key = json.substr(p, e - p);
      bool fresh = seen.insert(key).second;
      auto a = C::now();
      s = db->Put(wo, key, json);
      double us = std::chrono::duration<double, std::micro>(C::now() - a).count();
      if (!s.ok()) { std::cerr << s.ToString() << "\n"; return 1; }
      if (fresh) { ins += us; nins++; } else { upd += us; nupd++; }
    } else if (op == "rp") {
      std::string key = line.substr(t2 + 1);
      auto a = C::now();
      s = db->Get(ro, key, &got);
      get += std::chrono::duration<double, std::micro>(C::now() - a).count(); nget++;
    }
  }
  printf("leveldb-%s insert %ld %.2f update %ld %.2f put %.2f get %ld %.2f\n", argv[3], nins, ins / nins, nupd,
         nupd ? upd / nupd : 0.0, (ins + upd) / (nins + nupd), nget, nget ? get / nget : 0.0);
  delete db;
  return 0;
}
