#include "relay/batch_bytes.h"

int pb_claim_limit_first(int batch_size, int64_t batch_bytes)
{
    return batch_bytes > 0 && batch_size > PB_FIRST_CLAIM ? PB_FIRST_CLAIM : batch_size;
}

int pb_claim_limit_next(int batch_size, int64_t batch_bytes, int current, size_t n, size_t bytes)
{
    if (batch_bytes <= 0)
        return batch_size;
    if (n == 0)
        return current;
    uint64_t avg = bytes / n;
    if (avg == 0)
        avg = 1;
    uint64_t fit = (uint64_t)batch_bytes / avg;
    if (fit < 1)
        return 1;
    return fit >= (uint64_t)batch_size ? batch_size : (int)fit;
}
