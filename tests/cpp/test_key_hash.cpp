// hash_key: the per-key table's seeded hash of a key's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "permits/key_hash.hpp"

using permits::hash_key;

TEST(KeyHash, EqualKeysHashAlikeAndTheProcessSeedIsStable) {
    const std::string key = "suser-42";
    EXPECT_EQ(hash_key(key), hash_key(std::string("suser-") + "42"));
    EXPECT_EQ(hash_key(key, 7), hash_key(key, 7));
}

TEST(KeyHash, TheSeedChangesEveryHash) {
    int same = 0;
    for (int i = 0; i < 1000; ++i) {
        const std::string key = "user-" + std::to_string(i);
        same += hash_key(key, 1) == hash_key(key, 2) ? 1 : 0;
    }
    EXPECT_EQ(same, 0);
}

// Every length takes its own path (0, 1-3, 4-7, 8-16, longer): keys differing in one byte, in its
// length or in a trailing zero byte all hash differently.
TEST(KeyHash, KeysThatDifferInOneByteOrInLengthHashDifferently) {
    std::vector<std::string> keys;
    for (std::size_t n = 0; n <= 70; ++n) {
        const std::string base(n, 'a');
        keys.push_back(base);
        keys.push_back(base + std::string(1, '\0'));
        for (std::size_t at = 0; at < n; ++at) {
            std::string other = base;
            other[at] = 'b';
            keys.push_back(other);
        }
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (const std::uint64_t seed : {0ULL, 1ULL, 0x1234567890abcdefULL}) {
        std::unordered_set<std::uint64_t> hashes;
        for (const auto& key : keys) {
            hashes.insert(hash_key(key, seed));
        }
        EXPECT_EQ(hashes.size(), keys.size()) << "seed " << seed;
    }
}

// The table takes its shard from the low bits, a key's tag from bits 8-15 and its place in the
// index from the high 32: each must spread sequential keys evenly.
TEST(KeyHash, SequentialKeysSpreadEvenlyOverShardsTagsAndPlaces) {
    constexpr int kKeys = 64 * 1024;
    std::vector<int> shard(64), tag(256), place(256);
    for (int i = 0; i < kKeys; ++i) {
        const std::uint64_t h = hash_key("suser-" + std::to_string(i), 99);
        ++shard[h % 64];
        ++tag[(h >> 8) & 0xff];
        ++place[h >> 56];
    }
    // Expected 1024 a shard and 256 a tag or place; a fair hash stays well within these bounds.
    EXPECT_GT(*std::min_element(shard.begin(), shard.end()), 850);
    EXPECT_LT(*std::max_element(shard.begin(), shard.end()), 1200);
    EXPECT_GT(*std::min_element(tag.begin(), tag.end()), 170);
    EXPECT_LT(*std::max_element(tag.begin(), tag.end()), 350);
    EXPECT_GT(*std::min_element(place.begin(), place.end()), 170);
    EXPECT_LT(*std::max_element(place.begin(), place.end()), 350);
}
