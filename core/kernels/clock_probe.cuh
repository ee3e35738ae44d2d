// The SM clock the GPU is actually running at, for `teeny profile`: SM cycles (clock64) counted
// against the global nanosecond timer over a spin of `cycles` cycles. The clock is chip-wide, so
// one thread suffices, and so tiny a probe leaves the GPU as the timed kernels left it.
extern "C" __global__ void teeny_clock_probe(long long cycles, unsigned long long* out) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  long long c1 = c0;
  while (c1 - c0 < cycles) c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  out[0] = static_cast<unsigned long long>(c1 - c0);
  out[1] = t1 - t0;
}
