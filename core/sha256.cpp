#include "core/sha256.h"

#include <cstdint>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "core/error.h"

namespace teeny {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw Error("OpenSSL: cannot initialise a SHA-256 digest");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, size_t size) {
  if (EVP_DigestUpdate(ctx_, data, size) != 1) throw Error("OpenSSL: SHA-256 update failed");
}

Sha256& Sha256::part(std::string_view data) {
  uint64_t size = data.size();
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(size >> (8 * i));
  update(prefix, sizeof prefix);
  update(data.data(), data.size());
  return *this;
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_, digest, &length) != 1) throw Error("OpenSSL: SHA-256 final failed");
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string sha256_hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr) != 1) {
    throw Error("OpenSSL: SHA-256 digest failed");
  }
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

}  // namespace teeny
