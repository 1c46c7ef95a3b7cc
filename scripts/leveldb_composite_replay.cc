// Replays a chirp trace's writes (w) through two plain LevelDB databases
// the way LevelDB++'s stand-alone Composite index writes (the paper's §4.2:
// parse the JSON value, put the record into the primary table, put the
// composite key `secondary ‖ primary` with an empty value into the index
// table). A same-hour reference for issue #17's `composite` PUT cell, since
// LevelDB++'s own build is not available here: this is our reconstruction of
// its write path, not its code. Prints the mean latency of inserts (first
// write of a key), updates and all puts, in microseconds. Options as
// LevelDB++'s runs, for both tables: 64 MiB write buffer (the index
// table's is INDEX_BUFFER_MIB if given) and block cache, 10-bit Bloom
// filters.
//
//   apt-get install libleveldb-dev rapidjson-dev
//   g++ -O2 -std=c++17 scripts/leveldb_composite_replay.cc -o leveldb_composite_replay -lleveldb
//   ./leveldb_composite_replay TRACE.chirp DBDIR snappy|none [INDEX_BUFFER_MIB]
//
// The primary key of a write is its JSON "ID" field's digits, the secondary
// key its "UserID" field (as `strata bench replay --format chirp` takes them;
// integers only). The composite key is the secondary key as 8 big-endian
// bytes followed by the primary key's digits, so that it sorts by UserID.
#include <leveldb/cache.h>
#include <leveldb/db.h>
#include <leveldb/filter_policy.h>
#include <rapidjson/document.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <unordered_set>

static leveldb::DB* open_db(const std::string& path, bool snappy, int write_buffer_mib) {
  leveldb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = size_t(write_buffer_mib) << 20;
  o.block_cache = leveldb::NewLRUCache(64 << 20);
  o.filter_policy = leveldb::NewBloomFilterPolicy(10);
  o.compression = snappy ? leveldb::kSnappyCompression : leveldb::kNoCompression;
  leveldb::DB* db = nullptr;
  leveldb::Status s = leveldb::DB::Open(o, path, &db);
  if (!s.ok()) {
    std::cerr << path << ": " << s.ToString() << "\n";
    return nullptr;
  }
  return db;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: leveldb_composite_replay TRACE DBDIR snappy|none [INDEX_BUFFER_MIB]\n");
    return 2;
  }
  int index_buffer_mib = argc > 4 ? atoi(argv[4]) : 64;
  if (index_buffer_mib <= 0) {
    fprintf(stderr, "INDEX_BUFFER_MIB must be a positive number of MiB\n");
    return 2;
  }
  bool snappy = std::string(argv[3]) == "snappy";
  std::string dir = argv[2];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << dir << ": " << ec.message() << "\n";
    return 1;
  }
  leveldb::DB* primary = open_db(dir + "/primary", snappy, 64);
  leveldb::DB* index = open_db(dir + "/index", snappy, index_buffer_mib);
  if (!primary || !index) return 1;
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << argv[1] << ": cannot open\n";
    return 1;
  }
  std::string line;
  std::unordered_set<std::string> seen;
  double ins = 0, upd = 0;
  long nins = 0, nupd = 0;
  leveldb::WriteOptions wo;
  using C = std::chrono::steady_clock;
  while (std::getline(in, line)) {
    size_t t1 = line.find('\t');
    size_t t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) continue;
    if (line.compare(t1 + 1, t2 - t1 - 1, "w") != 0) continue;
    std::string json = line.substr(t2 + 1);
    // The primary key, found outside the timed part (the replay knows it).
    size_t p = json.find("\"ID\":");
    if (p == std::string::npos) {
      std::cerr << "a write without an integer ID: " << line << "\n";
      return 1;
    }
    p += 5;
    size_t e = p;
    while (e < json.size() && json[e] >= '0' && json[e] <= '9') e++;
    std::string key = json.substr(p, e - p);
    bool fresh = seen.insert(key).second;
    auto a = C::now();
    rapidjson::Document doc;
    doc.Parse(json.data(), json.size());
    if (doc.HasParseError() || !doc.IsObject()) {
      std::cerr << "malformed record: " << line << "\n";
      return 1;
    }
    auto uid = doc.FindMember("UserID");
    if (uid == doc.MemberEnd() || !uid->value.IsUint64()) {
      std::cerr << "a write without an integer UserID: " << line << "\n";
      return 1;
    }
    uint64_t sk = uid->value.GetUint64();
    std::string composite(8, '\0');
    for (int i = 0; i < 8; i++) composite[i] = char((sk >> (56 - 8 * i)) & 0xff);
    composite += key;
    leveldb::Status s = primary->Put(wo, key, json);
    if (s.ok()) s = index->Put(wo, composite, leveldb::Slice());
    double us = std::chrono::duration<double, std::micro>(C::now() - a).count();
    if (!s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
    if (fresh) {
      ins += us;
      nins++;
    } else {
      upd += us;
      nupd++;
    }
  }
  printf("leveldb-composite-%s insert %ld %.2f update %ld %.2f put %.2f\n", argv[3], nins,
         nins ? ins / nins : 0.0, nupd, nupd ? upd / nupd : 0.0,
         (nins + nupd) ? (ins + upd) / (nins + nupd) : 0.0);
  delete index;
  delete primary;
  return 0;
}
