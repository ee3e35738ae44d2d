// SHA-256 (OpenSSL EVP) as lowercase hex: bundle checksums and the kernel cache key.
#pragma once

#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace teeny {

std::string sha256_hex(std::string_view data);

// Incremental hashing for keys built from several parts. Each part is length-prefixed so
// ("ab", "c") and ("a", "bc") hash differently.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& part(std::string_view data);
  std::string hex();  // finishes the hash; the object is spent afterwards

 private:
  void update(const void* data, size_t size);
  ::evp_md_ctx_st* ctx_;
};

}  // namespace teeny
