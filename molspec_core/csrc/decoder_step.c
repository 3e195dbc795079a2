/* The lean decoder call in C (issue 16): one call of the Molecular Transformer's decoder, every layer
 * and the tied output projection, for float32 inference on one CPU core with AVX2, FMA and F16C
 * (AVX-512 and VNNI where the compiler is told the CPU has them); also the encoder and the
 * cross-attention keys/values of a new cache.
 *
 * It computes what molspec_core/npstep.py's NumpyStep computes (tests/test_native.py pins the two),
 * without the ~25 interpreter round trips per layer that cost more than the arithmetic at a few
 * rows. Weights are float16 values (the shipped ones are stored so), kept as float16 in panels of 16
 * output columns, (n_pad / 16, k, 16), and widened to float32 in registers: products are float32
 * products read at half the bytes. With dtype int8 (native.py) the products of the layers take int8
 * weights and per-row int8 activations instead, summed exactly in int32 (on AMX's tiles where the CPU
 * has them and a product has 3 rows or more, else on VNNI or AVX2: the same integers).
 *
 * Each row's result is computed by the same instructions in the same order whatever the other rows
 * of the call are (products sum over k in order, one accumulator per output column; attention and
 * norms are per row, and a key's score does not depend on how many keys the row has), so a token's
 * logits are bit-identical in a one-token greedy call and inside a nine-token verify call:
 * speculative decoding on this engine equals greedy to the bit.
 *
 * Threads (OpenMP, where the compiler has it; Model.threads): the products split their output
 * columns and row blocks, attention its rows, among the threads; every output element is still
 * computed by the same instructions in the same order, so results do not depend on the thread count.
 *
 * Built at first use by molspec_core/native.py with the machine's C compiler; no Python API is used,
 * ctypes calls `decoder_step`, `encode` and `cross_keys_values`.
 */
#define _DEFAULT_SOURCE /* syscall(), to ask Linux for AMX's tile registers */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The threads of the entry point running in this thread (Model.threads; 1 without OpenMP). Parallel
 * loops take them when their work pays for waking them: PARALLEL_WORK multiply-adds or more. */
static _Thread_local int team = 1;
#define PARALLEL_WORK 65536

/* for (int i = 0; i < n; i++) body, the iterations split among the team where `work` pays for waking it, else a
 * plain loop in this thread. Not an if clause on the loop's pragma: a region that clause keeps to one thread is still
 * entered (GOMP_parallel makes a team of one), some 0.4 us each on the test host, and a forward decoder call enters
 * about 80 of them: 30 us of a one-token int8 call on one thread. Each iteration runs the same code either way. */
#define PARALLEL_FOR(work, i, n, ...)                                                                          \
    do {                                                                                                       \
        const int parallel_n = (n);                                                                            \
        if (team > 1 && (work) >= PARALLEL_WORK) {                                                             \
            _Pragma("omp parallel for num_threads(team) schedule(static)")                                     \
            for (int i = 0; i < parallel_n; i++) __VA_ARGS__                                                   \
        } else {                                                                                               \
            for (int i = 0; i < parallel_n; i++) __VA_ARGS__                                                   \
        }                                                                                                      \
    } while (0)

/* Scratch memory, kept by each thread from call to call and grown when a call needs more. A malloc and
 * free of each product's few hundred kB per call went to the kernel for fresh zeroed pages every time
 * (glibc hands large blocks back on free): 7% of a forward beam search at batch 8 (measured). One buffer
 * per use, since a product runs inside a decoder call; a thread's buffers are freed when it ends (the app
 * runs each page in a thread of its own). */
enum { SCRATCH_CALL, SCRATCH_QUANTIZED, SCRATCH_ROW_SCALES, SCRATCH_SUMS, SCRATCH_KEYS_VALUES, SCRATCH_MOVES,
       SCRATCH_MOVE_READERS, SCRATCH_MOVE_SOURCES, SCRATCH_SOURCE_ROWS, SCRATCH_USES };
typedef struct {
    void *buffer[SCRATCH_USES];
    size_t size[SCRATCH_USES];
} Scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *held) {
    Scratch *s = held;
    for (int i = 0; i < SCRATCH_USES; i++) free(s->buffer[i]);
    free(s);
}

static void scratch_key_make(void) { pthread_key_create(&scratch_key, scratch_free); }

/* At least `bytes` of this thread's scratch for `use` (its old contents not kept); NULL when memory is short. */
static void *scratch(int use, size_t bytes) {
    pthread_once(&scratch_once, scratch_key_make);
    Scratch *s = pthread_getspecific(scratch_key);
    if (s == NULL) {
        s = calloc(1, sizeof(Scratch));
        if (s == NULL || pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (bytes > s->size[use]) {
        void *grown = malloc(bytes);
        if (grown == NULL) return NULL;
        free(s->buffer[use]);
        s->buffer[use] = grown;
        s->size[use] = bytes;
    }
    return s->buffer[use];
}

/* Whether the library was built with OpenMP (native.py reports it). */
int has_threads(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

typedef struct {
    const uint16_t *weight; /* float16 panels: (n_pad / 16, k, 16) */
    const float *bias;      /* (n_pad), zero past n */
    const float *gain;      /* (k): layer-norm gain applied to the input first (its shift is in bias); NULL: none */
    float eps;
    int32_t k, n, n_pad;
    /* int8 weights (dtype int8), used instead of `weight` when not NULL: per output column w = q * scale,
     * q in panels of 16 columns by 4 rows of k, (n_pad / 16, k4 / 4, 16, 4), k4 = k rounded up to 4 */
    const int8_t *q;
    const float *q_scale;   /* (n_pad) */
    const int32_t *q_sum;   /* (n_pad): sum over k of q, for the unsigned-activation form of VNNI */
    int32_t k4;
} Affine;

typedef struct {
    Affine qkv, self_out, cross_query, cross_out, up, down;
} Layer;

typedef struct {
    Affine qkv, out, up, down;
} EncoderLayer;

typedef struct {
    int32_t n_layers, d, heads, head_dim, d_ff, vocab, max_positions;
    float query_scale;      /* 1 / sqrt(head_dim), for the self-attention's query */
    int32_t threads;        /* threads a call may use (1: this thread alone) */
    const Layer *layers;
    const Affine *output;   /* final norm + tied projection */
    const float *embed;     /* (vocab, d), already times sqrt(d) */
    const float *positions; /* (max_positions, d) */
    int32_t n_encoder_layers;
    const EncoderLayer *encoder_layers;
    const float *encoder_gain, *encoder_shift; /* the encoder's final layer norm */
    float encoder_eps;
    const Affine *cross_keys_values; /* per decoder layer: memory -> its cross-attention keys and values */
} Model;

typedef struct {
    int32_t batch, t_new, capacity, upto, src_len;
    int32_t cross_batch;    /* rows of the cross keys/values: batch, or 1 shared by every row */
    int32_t pad_batch;      /* rows of src_pad: batch, or 1 */
    const int64_t *tokens;  /* (batch, t_new) */
    const int64_t *lengths; /* (batch): row b's new tokens take slots lengths[b] .. + t_new */
    float *const *keys;     /* per layer: (batch, heads, capacity, head_dim) */
    float *const *values;
    const float *const *cross_keys;   /* per layer: (cross_batch, heads, src_len, head_dim) */
    const float *const *cross_values;
    const uint8_t *src_pad; /* (pad_batch, src_len), nonzero = padding; NULL: none */
    float *pending;         /* (2, n_layers, batch, heads, t_new, head_dim): the new keys, then the new values */
    float *logits;          /* (batch * t_new, vocab) */
    float *weights;         /* (batch, t_new, src_len): last layer's head-mean cross-attention; NULL: not asked */
    const int64_t *rows;    /* (batch): the row of keys/values each call row reads and writes (a row pool's,
                             * speculative_beam.py); NULL: row b */
    const int64_t *cross_rows; /* per row of keys/values: the row of cross keys/values and src_pad it reads (beam
                                * search's slots share their query's, cache.KVCache.cross_rows); NULL: as above */
} Call;

/* ---- products -------------------------------------------------------------------------------- */

/* A block of `rows` rows by `cols` panels (16 output columns each), accumulated over k in order.
 * Few rows take several panels at once so that at least 8 independent FMA chains hide the FMA
 * latency (one row and one panel would wait 4 cycles per k). With AVX-512 a panel is one register
 * (32 of them), with AVX2 two (16 of them): the block shapes differ, the order of the sums does not. */
#ifdef __AVX512F__
#define ROWS_MAX 12 /* 12 rows x 2 panels = 24 accumulators, + 2 weights + 1 broadcast of 32 zmm */
#define COLS_MAX 8
static int panels_for(int rows) { return rows == 1 ? 8 : rows <= 3 ? 4 : 2; }
#else
#define ROWS_MAX 6 /* 6 rows x 1 panel x 2 halves = 12 accumulators, + 2 weights + 1 broadcast of 16 ymm */
#define COLS_MAX 4
/* 3 rows take one panel: with two, 12 accumulators and 4 widened weights overflow the 16 registers
 * (measured on an AVX2 EPYC: a 3-token call of the retro model took 1.40 ms with two, 0.95 with one). */
static int panels_for(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }
#endif

static inline __attribute__((always_inline)) void panel_block(int rows, int cols, const float *x, int64_t ldx,
                                                              const uint16_t *panel, int64_t panel_size, int k,
                                                              const float *bias, float *out, int64_t ldo, int relu) {
#ifdef __AVX512F__
    __m512 acc[ROWS_MAX][COLS_MAX];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) acc[r][c] = _mm512_setzero_ps();
    for (int i = 0; i < k; i++) {
        __m512 w[COLS_MAX];
        for (int c = 0; c < cols; c++)
            w[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(panel + c * panel_size + 16 * i)));
        for (int r = 0; r < rows; r++) {
            __m512 xv = _mm512_set1_ps(x[r * ldx + i]);
            for (int c = 0; c < cols; c++) acc[r][c] = _mm512_fmadd_ps(xv, w[c], acc[r][c]);
        }
    }
    for (int c = 0; c < cols; c++) {
        __m512 b = _mm512_loadu_ps(bias + 16 * c);
        for (int r = 0; r < rows; r++) {
            __m512 v = _mm512_add_ps(acc[r][c], b);
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_storeu_ps(out + r * ldo + 16 * c, v);
        }
    }
#else
    __m256 acc[ROWS_MAX][COLS_MAX][2];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    for (int i = 0; i < k; i++) {
        for (int c = 0; c < cols; c++) {
            const uint16_t *w = panel + c * panel_size + 16 * i;
            __m256 w_lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
            __m256 w_hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 8)));
            for (int r = 0; r < rows; r++) {
                __m256 xv = _mm256_broadcast_ss(x + r * ldx + i);
                acc[r][c][0] = _mm256_fmadd_ps(xv, w_lo, acc[r][c][0]);
                acc[r][c][1] = _mm256_fmadd_ps(xv, w_hi, acc[r][c][1]);
            }
        }
    }
    __m256 zero = _mm256_setzero_ps();
    for (int c = 0; c < cols; c++) {
        __m256 b_lo = _mm256_loadu_ps(bias + 16 * c), b_hi = _mm256_loadu_ps(bias + 16 * c + 8);
        for (int r = 0; r < rows; r++) {
            __m256 lo = _mm256_add_ps(acc[r][c][0], b_lo), hi = _mm256_add_ps(acc[r][c][1], b_hi);
            if (relu) {
                lo = _mm256_max_ps(lo, zero);
                hi = _mm256_max_ps(hi, zero);
            }
            _mm256_storeu_ps(out + r * ldo + 16 * c, lo);
            _mm256_storeu_ps(out + r * ldo + 16 * c + 8, hi);
        }
    }
#endif
}

/* The block shapes product() uses, each compiled with constant sizes so its accumulators stay in registers. */
#define CASE(R, C) case R * 16 + C: panel_block(R, C, xr, ldx, panel, panel_size, a->k, bias, o, a->n_pad, relu); break;
#define UP_TO_2(R) CASE(R, 1) CASE(R, 2)
#define UP_TO_4(R) UP_TO_2(R) CASE(R, 3) CASE(R, 4)
#ifdef __AVX512F__
#define SHAPES UP_TO_4(1) CASE(1, 5) CASE(1, 6) CASE(1, 7) CASE(1, 8) UP_TO_4(2) UP_TO_4(3) UP_TO_2(4) UP_TO_2(5) \
    UP_TO_2(6) UP_TO_2(7) UP_TO_2(8) UP_TO_2(9) UP_TO_2(10) UP_TO_2(11) UP_TO_2(12)
#else
#define SHAPES UP_TO_4(1) UP_TO_2(2) CASE(3, 1) CASE(4, 1) CASE(5, 1) CASE(6, 1)
#endif

/* A product's work items: (row block, panel group), the full row blocks first; each is one register
 * block of `rows` rows from row r by `cols` panels from panel p (panels(rows) of them, fewer at the end). */
typedef struct {
    int r, rows, p, cols;
} Tile;

static inline int tile_count(int m, int n_panels, int rows_max, int (*panels)(int)) {
    const int blocks = (m + rows_max - 1) / rows_max, last_rows = m - (blocks - 1) * rows_max;
    const int groups = (n_panels + panels(rows_max) - 1) / panels(rows_max);
    return (blocks - 1) * groups + (n_panels + panels(last_rows) - 1) / panels(last_rows);
}

static inline Tile tile_of(int item, int m, int n_panels, int rows_max, int (*panels)(int)) {
    const int blocks = (m + rows_max - 1) / rows_max, groups = (n_panels + panels(rows_max) - 1) / panels(rows_max);
    const int full = (blocks - 1) * groups;
    const int block = item < full ? item / groups : blocks - 1, group = item < full ? item % groups : item - full;
    Tile t;
    t.r = block * rows_max;
    t.rows = m - t.r < rows_max ? m - t.r : rows_max;
    const int step = panels(t.rows);
    t.p = group * step;
    t.cols = n_panels - t.p < step ? n_panels - t.p : step;
    return t;
}

/* out (m, n_pad) = x (m, k) @ W + bias, optionally ReLU'd; x rows ldx apart. */
static void product_fp16(const Affine *a, const float *x, int64_t ldx, int m, float *out, int relu) {
    if (m <= 0) return;
    const int64_t panel_size = (int64_t)a->k * 16;
    const int n_panels = a->n_pad / 16, items = tile_count(m, n_panels, ROWS_MAX, panels_for);
    PARALLEL_FOR((int64_t)m * a->n_pad * a->k, item, items, {
        const Tile t = tile_of(item, m, n_panels, ROWS_MAX, panels_for);
        const int rows = t.rows, cols = t.cols;
        const float *xr = x + t.r * ldx;
        const uint16_t *panel = a->weight + t.p * panel_size;
        const float *bias = a->bias + 16 * t.p;
        float *o = out + (int64_t)t.r * a->n_pad + 16 * t.p;
        switch (rows * 16 + cols) { SHAPES }
    });
}

/* ---- int8 products (dtype int8) ---------------------------------------------------------------
 * Activations are quantized per row, x = xq * row_scale with xq in [-127, 127]; the sums of xq * q are
 * integers, exact in any order, so every path (VNNI, or the plain loop the compiler vectorizes) gives
 * the same int32 sums, and the same floats after one shared rounding: fma(sum, row_scale * q_scale, bias). */

/* Row r's scale: its largest magnitude over 127 (0 for a zero row), and the factor that maps it to 127. */
static inline void row_range(const float *row, int k, float *scale, float *inv) {
    /* four maxima at a time: one chain waited 4 cycles on each maximum (half of a quantization's time, perf) */
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 part[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int i = 0;
    for (; i + 32 <= k; i += 32)
        for (int c = 0; c < 4; c++)
            part[c] = _mm256_max_ps(part[c], _mm256_andnot_ps(sign, _mm256_loadu_ps(row + i + 8 * c)));
    __m256 lanes = _mm256_max_ps(_mm256_max_ps(part[0], part[1]), _mm256_max_ps(part[2], part[3]));
    for (; i + 8 <= k; i += 8) lanes = _mm256_max_ps(lanes, _mm256_andnot_ps(sign, _mm256_loadu_ps(row + i)));
    float top = 0.0f, all[8];
    _mm256_storeu_ps(all, lanes);
    for (int j = 0; j < 8; j++) top = all[j] > top ? all[j] : top;
    for (; i < k; i++) top = fabsf(row[i]) > top ? fabsf(row[i]) : top; /* a maximum: the same in any order */
    *scale = top / 127.0f;
    *inv = top > 0.0f ? 127.0f / top : 0.0f;
}

/* Row r as int8: its scale (row_range) and each value rounded to nearest, ties to even, clamped to
 * [-127, 127]; zeros from k to k4. The VNNI path rounds the same way 16 at a time. */
static inline void quantize_row(const float *row, int k, int k4, int8_t *xq, float *scale) {
    float inv;
    row_range(row, k, scale, &inv);
    for (int i = 0; i < k4; i++) {
        float v = i < k ? nearbyintf(row[i] * inv) : 0.0f;
        xq[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
}

#if defined(__AVX512VNNI__) && defined(__AVX512F__) && defined(__AVX512BW__)
int int8_vnni(void) { return 1; }

#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__linux__) /* arch_prctl: Linux only */
#include <sys/syscall.h>
#include <unistd.h>

/* AMX (Intel's tile unit, from Sapphire Rapids on): one instruction multiplies 16 rows of 64 unsigned bytes
 * by 64 rows x 16 columns of signed bytes into 16 x 16 int32 sums, VNNI's sums 16 times over; the panels are
 * already in the layout its right-hand tile takes (16 columns x 4 bytes of k per 64-byte row). The sums are
 * the same integers, so every path still gives the same bits. Linux lends the tile registers to a process
 * that asks (arch_prctl); where it refuses, the VNNI kernel runs. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
static int amx_granted;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void amx_ask(void) { amx_granted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }
int int8_amx(void) {
    pthread_once(&amx_once, amx_ask);
    return amx_granted;
}

/* Tiles of 64-byte rows: tmm0-3 the sums of 2 x 2 blocks, tmm4-5 two row blocks of activations, tmm6-7 two
 * panels of weights (16 rows of 4 bytes of k by 16 columns). `rows` rows of activations and sums: 16, or fewer
 * for the product's last rows (an instruction takes time by its rows: 8 of them take 0.7 of 16's time, 4 0.6).
 * The configuration is the thread's own. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t bytes[16];
    uint8_t rows[16];
} TileConfig;

static void amx_configure(int rows) {
    TileConfig config = {0};
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.bytes[t] = 64;
        config.rows[t] = t < 6 ? rows : 16;
    }
    _tile_loadconfig(&config);
}

/* The sums of one block of rows from row 16 * block (as many rows as the tiles are configured for), or of two
 * blocks of 16 when two_rows, by panel p, and p + 1 too when two_cols: all of k in one pass. */
static inline void amx_item(const Affine *a, const uint8_t *xu, int block, int two_rows, int p, int two_cols,
                            int32_t *sums) {
    const int64_t k4 = a->k4, panel_size = k4 * 16, ld = (int64_t)a->n_pad * sizeof(int32_t);
    const uint8_t *x = xu + (int64_t)block * 16 * k4;
    const int8_t *w = a->q + p * panel_size;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t s = 0; s < k4; s += 64) { /* k from s to s + 64 */
        _tile_loadd(4, x + s, k4);
        _tile_loadd(6, w + 16 * s, 64);
        _tile_dpbusd(0, 4, 6);
        if (two_cols) {
            _tile_loadd(7, w + panel_size + 16 * s, 64);
            _tile_dpbusd(1, 4, 7);
        }
        if (two_rows) {
            _tile_loadd(5, x + 16 * k4 + s, k4);
            _tile_dpbusd(2, 5, 6);
            if (two_cols) _tile_dpbusd(3, 5, 7);
        }
    }
    int32_t *out = sums + (int64_t)block * 16 * a->n_pad + 16 * p;
    _tile_stored(0, out, ld);
    if (two_cols) _tile_stored(1, out + 16, ld);
    if (two_rows) _tile_stored(2, out + 16 * a->n_pad, ld);
    if (two_rows && two_cols) _tile_stored(3, out + 16 * a->n_pad + 16, ld);
}

/* sums (m, n_pad) = xu (m, k4) x the panels; k4 a multiple of 64. Items of 2 blocks of 16 rows by 2 panels
 * (fewer at the edges), then the last m % 16 rows by 2 panels in tiles of as many rows. */
static void amx_sums(const Affine *a, const uint8_t *xu, int m, int32_t *sums) {
    const int n_panels = a->n_pad / 16, blocks = m / 16, tail = m % 16;
    const int col_pairs = (n_panels + 1) / 2, items = (blocks + 1) / 2 * col_pairs;
#pragma omp parallel num_threads(team) if (team > 1 && (int64_t)m * a->n_pad * a->k4 / 4 >= PARALLEL_WORK)
    {
        if (items > 0) {
            amx_configure(16);
#pragma omp for schedule(static) nowait
            for (int item = 0; item < items; item++) {
                const int block = item / col_pairs * 2, p = item % col_pairs * 2;
                amx_item(a, xu, block, block + 1 < blocks, p, p + 1 < n_panels, sums);
            }
        }
        if (tail > 0) {
            amx_configure(tail);
#pragma omp for schedule(static) nowait
            for (int pair = 0; pair < col_pairs; pair++)
                amx_item(a, xu, blocks, 0, 2 * pair, 2 * pair + 1 < n_panels, sums);
        }
        _tile_release();
    }
}
/* From 3 rows on: below, VNNI is as fast or faster (whole int8 products of the forward model's four shapes,
 * VNNI's time over AMX's on one thread of a Xeon: 0.75-0.92 at 1 row, 0.89-1.13 at 2, 1.07-1.19 at 3, 1.2-1.5
 * at 4, 1.2-1.9 from 8 to 96 rows). */
#define AMX_ROWS_MIN 3
#define AMX_FITS(a, m) ((a)->k4 % 64 == 0 && (m) >= AMX_ROWS_MIN && int8_amx())
#else
int int8_amx(void) { return 0; }
#define AMX_FITS(a, m) 0
#define amx_sums(a, xu, m, sums) ((void)0)
#endif

/* VNNI multiplies unsigned by signed bytes: the activations go in as xq + 128, in [1, 255], and
 * 128 * q_sum is taken off the sums again. */
static inline __attribute__((always_inline)) void int8_block(int rows, int cols, const uint8_t *xu, int64_t ldx,
                                                             const int8_t *panel, int64_t panel_size, int groups,
                                                             int32_t *sums, int64_t lds) {
    __m512i acc[ROWS_MAX][COLS_MAX];
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) acc[r][c] = _mm512_setzero_si512();
    for (int g = 0; g < groups; g++) {
        __m512i w[COLS_MAX];
        for (int c = 0; c < cols; c++) {
            w[c] = _mm512_loadu_si512((const void *)(panel + c * panel_size + 64 * g));
            /* held in its register for every row: GCC folded the load into each row's dpbusd instead, so a block
             * of 3 rows x 4 panels read 12 weight vectors a step where 4 do, and the loads, one 64-byte vector a
             * cycle on Zen 4, bounded the block (a forward decoder call's products of 3 rows: 125 -> 110 us) */
            if (rows > 1) __asm__("" : "+v"(w[c]));
        }
        for (int r = 0; r < rows; r++) {
            int32_t four;
            memcpy(&four, xu + r * ldx + 4 * g, 4);
            __m512i xv = _mm512_set1_epi32(four);
            for (int c = 0; c < cols; c++) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], xv, w[c]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) _mm512_storeu_si512((void *)(sums + r * lds + 16 * c), acc[r][c]);
}

#define ICASE(R, C) case R * 16 + C: int8_block(R, C, xr, k4, panel, panel_size, k4 / 4, sr, n_pad); break;
#define IUP_TO_2(R) ICASE(R, 1) ICASE(R, 2)
#define IUP_TO_4(R) IUP_TO_2(R) ICASE(R, 3) ICASE(R, 4)
#define ISHAPES IUP_TO_4(1) ICASE(1, 5) ICASE(1, 6) ICASE(1, 7) ICASE(1, 8) IUP_TO_4(2) IUP_TO_4(3) IUP_TO_2(4) \
    IUP_TO_2(5) IUP_TO_2(6) IUP_TO_2(7) IUP_TO_2(8) IUP_TO_2(9) IUP_TO_2(10) IUP_TO_2(11) IUP_TO_2(12)

static int product_int8(const Affine *a, const float *x, int64_t ldx, int m, float *out, int relu) {
    if (m <= 0) return 0;
    const int k = a->k, k4 = a->k4, n_pad = a->n_pad, n_panels = n_pad / 16;
    const int64_t panel_size = (int64_t)k4 * 16;
    const int amx = AMX_FITS(a, m);
    uint8_t *xu = scratch(SCRATCH_QUANTIZED, (size_t)m * k4 + 64);
    float *row_scale = scratch(SCRATCH_ROW_SCALES, sizeof(float) * (size_t)m);
    int32_t *sums = scratch(SCRATCH_SUMS, sizeof(int32_t) * (size_t)m * n_pad);
    if (xu == NULL || row_scale == NULL || sums == NULL) return 1;
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    PARALLEL_FOR((int64_t)m * k * 8, r, m, { /* the rounding of the plain path, 16 at a time: nearest, ties to even */
        float inv;
        row_range(x + r * ldx, k, row_scale + r, &inv);
        const __m512 scale = _mm512_set1_ps(inv);
        for (int i = 0; i < k4; i += 16) {
            __mmask16 valid = i + 16 <= k ? 0xFFFF : (__mmask16)((1u << (k > i ? k - i : 0)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(valid, x + r * ldx + i);
            v = _mm512_roundscale_ps(_mm512_mul_ps(v, scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(128));
            __mmask16 keep = i + 16 <= k4 ? 0xFFFF : (__mmask16)((1u << (k4 - i)) - 1);
            _mm512_mask_cvtepi32_storeu_epi8(xu + (int64_t)r * k4 + i, keep, u);
        }
    });
    if (amx) { /* else VNNI, whose parallel region would otherwise wake the threads for no block */
        amx_sums(a, xu, m, sums);
    } else {
        const int items = tile_count(m, n_panels, ROWS_MAX, panels_for);
        PARALLEL_FOR((int64_t)m * n_pad * k / 4, item, items, { /* as product_fp16 */
            const Tile t = tile_of(item, m, n_panels, ROWS_MAX, panels_for);
            const int rows = t.rows, cols = t.cols;
            const uint8_t *xr = xu + (int64_t)t.r * k4;
            const int8_t *panel = a->q + t.p * panel_size;
            int32_t *sr = sums + (int64_t)t.r * n_pad + 16 * t.p;
            switch (rows * 16 + cols) { ISHAPES }
        });
    }
    const __m512 zero = _mm512_setzero_ps();
    PARALLEL_FOR((int64_t)m * n_pad * 8, r, m, { /* fma(sum, row_scale * q_scale, bias), as the plain path rounds it */
        const __m512 rs = _mm512_set1_ps(row_scale[r]);
        for (int n = 0; n < n_pad; n += 16) {
            __m512i sum = _mm512_sub_epi32(_mm512_loadu_si512((const void *)(sums + (int64_t)r * n_pad + n)),
                                           _mm512_slli_epi32(_mm512_loadu_si512((const void *)(a->q_sum + n)), 7));
            __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(rs, _mm512_loadu_ps(a->q_scale + n)),
                                       _mm512_loadu_ps(a->bias + n));
            if (relu) v = _mm512_max_ps(v, zero);
            _mm512_storeu_ps(out + (int64_t)r * n_pad + n, v);
        }
    });
    return 0;
}
#elif defined(__AVX2__) && !defined(INT8_PLAIN)
int int8_vnni(void) { return 0; }
int int8_amx(void) { return 0; }

/* AVX2 has no 4-byte dot product into 32 bits; vpmaddubsw (unsigned by signed bytes, pairs summed into
 * 16 bits) saturates on VNNI's unsigned form (255 * 127 * 2 does not fit). So each activation's sign
 * goes onto its weight (vpsignb) and its magnitude, at most 127, multiplies: a pair sums to at most
 * 2 * 127 * 127 = 32258, exact in 16 bits, and vpmaddwd by ones adds the pairs into int32. The sums are
 * VNNI's and the plain loop's to the bit. A block holds rows x cols panels of two ymm accumulators. */
#define I8_ROWS_MAX 4
static int i8_panels_for(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }

static inline __attribute__((always_inline)) void int8_block(int rows, int cols, const int8_t *xq, int64_t ldx,
                                                             const int8_t *panel, int64_t panel_size, int groups,
                                                             int32_t *sums, int64_t lds) {
    __m256i acc[I8_ROWS_MAX][4][2];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_si256();
    for (int g = 0; g < groups; g++) {
        for (int r = 0; r < rows; r++) {
            int32_t four;
            memcpy(&four, xq + r * ldx + 4 * g, 4);
            const __m256i xv = _mm256_set1_epi32(four), magnitude = _mm256_abs_epi8(xv);
            for (int c = 0; c < cols; c++) {
                const int8_t *w = panel + c * panel_size + 64 * g; /* 16 columns x 4 bytes of k */
                for (int h = 0; h < 2; h++) {
                    __m256i signed_w = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(w + 32 * h)), xv);
                    __m256i pairs = _mm256_maddubs_epi16(magnitude, signed_w);
                    acc[r][c][h] = _mm256_add_epi32(acc[r][c][h], _mm256_madd_epi16(pairs, ones));
                }
            }
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            for (int h = 0; h < 2; h++)
                _mm256_storeu_si256((__m256i *)(sums + r * lds + 16 * c + 8 * h), acc[r][c][h]);
}

#define ICASE(R, C) case R * 16 + C: int8_block(R, C, xr, k4, panel, panel_size, k4 / 4, sr, n_pad); break;
#define ISHAPES ICASE(1, 1) ICASE(1, 2) ICASE(1, 3) ICASE(1, 4) ICASE(2, 1) ICASE(2, 2) ICASE(3, 1) ICASE(4, 1)

static int product_int8(const Affine *a, const float *x, int64_t ldx, int m, float *out, int relu) {
    if (m <= 0) return 0;
    const int k = a->k, k4 = a->k4, n_pad = a->n_pad, n_panels = n_pad / 16;
    const int64_t panel_size = (int64_t)k4 * 16;
    int8_t *xq = scratch(SCRATCH_QUANTIZED, (size_t)m * k4 + 64);
    float *row_scale = scratch(SCRATCH_ROW_SCALES, sizeof(float) * (size_t)m);
    int32_t *sums = scratch(SCRATCH_SUMS, sizeof(int32_t) * (size_t)m * n_pad);
    if (xq == NULL || row_scale == NULL || sums == NULL) return 1;
    for (int r = 0; r < m; r++) quantize_row(x + r * ldx, k, k4, xq + (int64_t)r * k4, row_scale + r);
    const int items = tile_count(m, n_panels, I8_ROWS_MAX, i8_panels_for);
    PARALLEL_FOR((int64_t)m * n_pad * k / 4, item, items, { /* as product_fp16 */
        const Tile t = tile_of(item, m, n_panels, I8_ROWS_MAX, i8_panels_for);
        const int rows = t.rows, cols = t.cols;
        const int8_t *xr = xq + (int64_t)t.r * k4;
        const int8_t *panel = a->q + t.p * panel_size;
        int32_t *sr = sums + (int64_t)t.r * n_pad + 16 * t.p;
        switch (rows * 16 + cols) { ISHAPES }
    });
    const __m256 zero = _mm256_setzero_ps();
    for (int r = 0; r < m; r++) { /* fma(sum, row_scale * q_scale, bias), as the plain path rounds it */
        const __m256 rs = _mm256_set1_ps(row_scale[r]);
        for (int n = 0; n < n_pad; n += 8) {
            __m256 sum = _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(sums + (int64_t)r * n_pad + n)));
            __m256 v = _mm256_fmadd_ps(sum, _mm256_mul_ps(rs, _mm256_loadu_ps(a->q_scale + n)),
                                       _mm256_loadu_ps(a->bias + n));
            if (relu) v = _mm256_max_ps(v, zero);
            _mm256_storeu_ps(out + (int64_t)r * n_pad + n, v);
        }
    }
    return 0;
}
#else
int int8_vnni(void) { return 0; }
int int8_amx(void) { return 0; }

/* The plain path: the same int32 sums and the same roundings as the VNNI one, one at a time. */
static int product_int8(const Affine *a, const float *x, int64_t ldx, int m, float *out, int relu) {
    const int k = a->k, k4 = a->k4, n_pad = a->n_pad;
    PARALLEL_FOR((int64_t)m * n_pad * k, r, m, {
        int8_t xq[k4];
        float row_scale;
        quantize_row(x + r * ldx, k, k4, xq, &row_scale);
        for (int p = 0; p < n_pad / 16; p++) {
            int32_t acc[16] = {0};
            const int8_t *panel = a->q + (int64_t)p * k4 * 16;
            for (int g = 0; g < k4 / 4; g++)
                for (int c = 0; c < 16; c++)
                    for (int j = 0; j < 4; j++) acc[c] += (int32_t)xq[4 * g + j] * panel[64 * g + 4 * c + j];
            for (int c = 0; c < 16; c++) {
                int n = 16 * p + c;
                float v = fmaf((float)acc[c], row_scale * a->q_scale[n], a->bias[n]);
                out[(int64_t)r * n_pad + n] = relu && v < 0.0f ? 0.0f : v;
            }
        }
    });
    return 0;
}
#endif

/* The sum of 8 lanes, in one fixed order. */
static inline float lanes_sum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* (x - mean) / sqrt(var + eps) * gain, row by row (torch.layer_norm with no shift; it is in the bias);
 * d a multiple of 8 (native.py asks for 16). Sums in 8 lanes: one chain each would wait on the adder. */
static void normalized(const float *x, int m, int d, const float *gain, float eps, float *out) {
    for (int r = 0; r < m; r++) {
        const float *row = x + (int64_t)r * d;
        __m256 acc = _mm256_setzero_ps();
        for (int i = 0; i < d; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(row + i));
        const float mean = lanes_sum(acc) / (float)d;
        const __m256 centre = _mm256_set1_ps(mean);
        acc = _mm256_setzero_ps();
        for (int i = 0; i < d; i += 8) {
            __m256 c = _mm256_sub_ps(_mm256_loadu_ps(row + i), centre);
            acc = _mm256_fmadd_ps(c, c, acc);
        }
        const __m256 inv = _mm256_set1_ps(1.0f / sqrtf(lanes_sum(acc) / (float)d + eps));
        for (int i = 0; i < d; i += 8) {
            __m256 c = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), centre), inv);
            _mm256_storeu_ps(out + (int64_t)r * d + i, _mm256_mul_ps(c, _mm256_loadu_ps(gain + i)));
        }
    }
}

/* Rows an int8 product takes at a time: its quantized rows and int32 sums then stay in the core's cache. The
 * encoder's products of a batch of 32 queries span some 2,000 rows, and their sums (8 MB for the feed-forward's
 * first product) went out to memory and back. Each row's result is the same in any block. */
#define PRODUCT_ROWS 96

/* Returns nonzero where scratch memory could not be had (int8 only). */
static int product(const Affine *a, const float *x, int64_t ldx, int m, float *out, int relu) {
    if (a->q == NULL) {
        product_fp16(a, x, ldx, m, out, relu);
        return 0;
    }
    for (int r = 0; r < m; r += PRODUCT_ROWS)
        if (product_int8(a, x + (int64_t)r * ldx, ldx, m - r < PRODUCT_ROWS ? m - r : PRODUCT_ROWS,
                         out + (int64_t)r * a->n_pad, relu))
            return 1;
    return 0;
}

/* out = [norm](x) @ W + bias; `normed` holds the normalized rows (m, k). */
static int affine(const Affine *a, const float *x, int m, float *normed, float *out, int relu) {
    if (a->gain == NULL) return product(a, x, a->k, m, out, relu);
    normalized(x, m, a->k, a->gain, a->eps, normed);
    return product(a, normed, a->k, m, out, relu);
}

/* x (m, d) += y (m, n_pad == d's padded width) */
static void add_rows(float *x, const float *y, int m, int d, int ldy) {
    for (int r = 0; r < m; r++)
        for (int i = 0; i < d; i++) x[(int64_t)r * d + i] += y[(int64_t)r * ldy + i];
}

/* ---- attention ------------------------------------------------------------------------------- */

static inline float dot(const float *a, const float *b, int n) {
    __m256 acc = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    float total = lanes_sum(acc);
    for (; i < n; i++) total += a[i] * b[i];
    return total;
}

/* exp(x) for x <= 0, 8 at a time: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor polynomial
 * to degree 7 (relative error under 2e-7 over that range), times 2^n through the exponent bits.
 * Below -87 (exp ~ 1.6e-38, the smallest normal float) the result is 0, as for -INFINITY. */
static inline __m256 exp_nonpositive(__m256 x) {
    __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x); /* ln2 in two parts: exact n * high */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(bits)), keep); /* masked scores: exactly 0 */
}

/* scores[0..n) -> softmax in place; entries at -INFINITY (masked) become 0. */
static void softmax_(float *scores, int n) {
    /* the maximum, 8 lanes at a time (a maximum is the same in any order; one compare after another waited on
     * each) */
    __m256 tops = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) tops = _mm256_max_ps(tops, _mm256_loadu_ps(scores + j));
    float top = -INFINITY, lanes_top[8];
    _mm256_storeu_ps(lanes_top, tops);
    for (int i = 0; i < 8; i++) top = lanes_top[i] > top ? lanes_top[i] : top;
    for (; j < n; j++) top = scores[j] > top ? scores[j] : top;
    __m256 shift = _mm256_set1_ps(top), acc = _mm256_setzero_ps();
    j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), shift));
        _mm256_storeu_ps(scores + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float tail[8] = {0};
    if (j < n) {
        float in[8];
        for (int i = 0; i < 8; i++) in[i] = j + i < n ? scores[j + i] - top : -INFINITY;
        _mm256_storeu_ps(tail, exp_nonpositive(_mm256_loadu_ps(in)));
        for (int i = 0; j + i < n; i++) scores[j + i] = tail[i];
        acc = _mm256_add_ps(acc, _mm256_loadu_ps(tail)); /* lanes past n hold 0 */
    }
    float lanes[8], total = 0.0f;
    _mm256_storeu_ps(lanes, acc);
    for (int i = 0; i < 8; i++) total += lanes[i];
    const float inv = 1.0f / total;
    const __m256 invs = _mm256_set1_ps(inv);
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(scores + j, _mm256_mul_ps(_mm256_loadu_ps(scores + j), invs));
    for (; j < n; j++) scores[j] *= inv;
}

/* out (hd) = sum_j probs[j] * values[j] (values rows hd apart) */
/* out (hd) = sum_j probs[j] * values[j], the values' rows `stride` apart, summed over j in order. */
static void weighted_sum(const float *probs, const float *values, int64_t stride, int n, int hd, float *out) {
    int c0 = 0;
    for (; c0 + 32 <= hd; c0 += 32) { /* 32 columns in 4 registers at a time */
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < n; j++) {
            const __m256 p = _mm256_set1_ps(probs[j]);
            const float *v = values + (int64_t)j * stride + c0;
            for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + 8 * i), acc[i]);
        }
        for (int i = 0; i < 4; i++) _mm256_storeu_ps(out + c0 + 8 * i, acc[i]);
    }
    for (int i = c0; i < hd; i++) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++) acc = fmaf(probs[j], values[(int64_t)j * stride + i], acc);
        out[i] = acc;
    }
}

/* weighted_sum of two heads at once, of the same n and stride: each head summed as weighted_sum sums it, to the
 * same bits, in 8 independent FMA chains where one head has 4, which wait on the FMA's latency. */
static void weighted_sum2(const float *probs_a, const float *values_a, const float *probs_b, const float *values_b,
                          int64_t stride, int n, int hd, float *out_a, float *out_b) {
    int c0 = 0;
    for (; c0 + 32 <= hd; c0 += 32) {
        __m256 acc_a[4], acc_b[4];
        for (int i = 0; i < 4; i++) acc_a[i] = acc_b[i] = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            const __m256 pa = _mm256_set1_ps(probs_a[j]), pb = _mm256_set1_ps(probs_b[j]);
            const float *va = values_a + (int64_t)j * stride + c0, *vb = values_b + (int64_t)j * stride + c0;
            for (int i = 0; i < 4; i++) {
                acc_a[i] = _mm256_fmadd_ps(pa, _mm256_loadu_ps(va + 8 * i), acc_a[i]);
                acc_b[i] = _mm256_fmadd_ps(pb, _mm256_loadu_ps(vb + 8 * i), acc_b[i]);
            }
        }
        for (int i = 0; i < 4; i++) {
            _mm256_storeu_ps(out_a + c0 + 8 * i, acc_a[i]);
            _mm256_storeu_ps(out_b + c0 + 8 * i, acc_b[i]);
        }
    }
    if (c0 < hd) { /* the columns past the last 32, as weighted_sum takes them */
        weighted_sum(probs_a, values_a + c0, stride, n, hd - c0, out_a + c0);
        weighted_sum(probs_b, values_b + c0, stride, n, hd - c0, out_b + c0);
    }
}

/* The dot products of q (hd, a multiple of 8) with the first m of 8 keys `stride` apart (m <= 8), as one
 * vector: 8 keys' partial sums in 8 registers (those past m left at zero, their keys not read), reduced
 * together by a tree of horizontal adds in which each key's lanes meet only each other: a key's score is
 * the same whatever m. */
static inline __attribute__((always_inline)) __m256 dot8(const float *q, const float *keys, int64_t stride,
                                                         int hd, int m) {
    __m256 a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_ps();
    for (int c = 0; c < hd; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + c);
        for (int i = 0; i < 8; i++)
            if (i < m) a[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + i * stride + c), a[i]);
    }
    __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

/* scores[j] = q . keys[j] for j < n, keys `stride` apart. Every key's score is computed the same way
 * (dot8: a last group of fewer than 8 keys leaves the rest of its registers at zero), whatever n. */
static void scores_of(const float *q, const float *keys, int64_t stride, int n, int hd, float *scores) {
    if (hd % 8 != 0) {
        for (int j = 0; j < n; j++) scores[j] = dot(q, keys + (int64_t)j * stride, hd);
        return;
    }
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(scores + j, dot8(q, keys + (int64_t)j * stride, stride, hd, 8));
    if (j < n) {
        float out[8];
        _mm256_storeu_ps(out, dot8(q, keys + (int64_t)j * stride, stride, hd, n - j));
        for (int i = 0; j + i < n; i++) scores[j + i] = out[i];
    }
}

/* ---- the call -------------------------------------------------------------------------------- */

static int32_t pad16(int32_t n) { return (n + 15) / 16 * 16; }

static inline int64_t slot_row(const Call *call, int b) { return call->rows == NULL ? b : call->rows[b]; }

int decoder_step(const Model *model, const Call *call) {
    const int B = call->batch, T = call->t_new, M = B * T;
    const int d = model->d, H = model->heads, hd = model->head_dim, S = call->src_len;
    const int64_t cap = call->capacity;
    team = model->threads;
    int widest = 3 * d > model->d_ff ? 3 * d : model->d_ff;
    if (model->vocab > widest) widest = model->vocab;
    size_t floats = (size_t)M * d * 3 + (size_t)M * pad16(widest);
    float *block = scratch(SCRATCH_CALL, floats * sizeof(float));
    if (block == NULL) return 1;
    float *x = block, *h = x + (size_t)M * d, *attn = h + (size_t)M * d, *wide = attn + (size_t)M * d;

    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *e = model->embed + call->tokens[b * T + t] * d;
            const float *pos = model->positions + (call->lengths[b] + t) * d;
            for (int i = 0; i < d; i++) x[((int64_t)b * T + t) * d + i] = e[i] + pos[i];
        }
    if (call->weights != NULL) memset(call->weights, 0, sizeof(float) * (size_t)M * S);
    /* each source's width up to its last kept token: the keys past it are masked, so cross-attention reads no
     * further (a masked key adds an exact 0 to the softmax's sums and to the weighted values, and its weight
     * stays 0: the same to the bit as over the padded width). A source with no kept token keeps the full width. */
    const int n_pads = call->src_pad == NULL ? 1 : call->pad_batch;
    int32_t src_used[n_pads];
    for (int p = 0; p < n_pads; p++) {
        int n = S;
        if (call->src_pad != NULL)
            while (n > 0 && call->src_pad[(int64_t)p * S + n - 1]) n--;
        src_used[p] = n > 0 ? n : S;
    }

    for (int l = 0; l < model->n_layers; l++) {
        const Layer *layer = model->layers + l;
        float *keys = call->keys[l], *values = call->values[l];
        const int64_t layer_pending = (int64_t)B * H * T * hd;
        float *pending_keys = call->pending + l * layer_pending;
        float *pending_values = call->pending + (model->n_layers + l) * layer_pending;
        const int ldq = layer->qkv.n_pad;
        /* self-attention: new keys/values into their slots (and pending), then each token reads its row's
         * prefix and the new tokens up to itself: slots 0 .. lengths[b] + t */
        int failed = affine(&layer->qkv, x, M, h, wide, 0);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *row = wide + ((int64_t)b * T + t) * ldq;
                int64_t slot = call->lengths[b] + t;
                for (int hh = 0; hh < H; hh++) {
                    int64_t at = (((int64_t)slot_row(call, b) * H + hh) * cap + slot) * hd;
                    int64_t pend = (((int64_t)b * H + hh) * T + t) * hd;
                    memcpy(keys + at, row + d + hh * hd, sizeof(float) * hd);
                    memcpy(values + at, row + 2 * d + hh * hd, sizeof(float) * hd);
                    memcpy(pending_keys + pend, row + d + hh * hd, sizeof(float) * hd);
                    memcpy(pending_values + pend, row + 2 * d + hh * hd, sizeof(float) * hd);
                }
            }
        PARALLEL_FOR((int64_t)M * call->upto * d * 2, bt, M, {
            const int b = bt / T, t = bt % T;
            const float *row = wide + (int64_t)bt * ldq;
            int n = (int)(call->lengths[b] + t + 1);
            float scores[2][n];
            for (int hh = 0; hh < H; hh += 2) { /* heads in pairs: weighted_sum2 */
                const int pair = hh + 1 < H;
                for (int e = 0; e <= pair; e++) {
                    const float *k = keys + ((int64_t)slot_row(call, b) * H + hh + e) * cap * hd;
                    float q[hd];
                    for (int i = 0; i < hd; i++) q[i] = row[(hh + e) * hd + i] * model->query_scale;
                    scores_of(q, k, hd, n, hd, scores[e]);
                    softmax_(scores[e], n);
                }
                const float *v = values + ((int64_t)slot_row(call, b) * H + hh) * cap * hd;
                float *out = attn + (int64_t)bt * d + hh * hd;
                if (pair) weighted_sum2(scores[0], v, scores[1], v + cap * hd, hd, n, hd, out, out + hd);
                else weighted_sum(scores[0], v, hd, n, hd, out);
            }
        });
        failed |= product(&layer->self_out, attn, d, M, wide, 0);
        add_rows(x, wide, M, d, layer->self_out.n_pad);

        /* cross-attention over the source (query scale folded into cross_query) */
        failed |= affine(&layer->cross_query, x, M, h, wide, 0);
        const int ldc = layer->cross_query.n_pad;
        const int last = l == model->n_layers - 1 && call->weights != NULL;
        PARALLEL_FOR((int64_t)M * S * d * 2, bt, M, {
            const int b = bt / T;
            const int64_t row = slot_row(call, b), own = call->cross_rows == NULL ? row : call->cross_rows[row];
            const int64_t cb = call->cross_batch == 1 ? 0 : own;
            const int64_t p = call->src_pad == NULL || call->pad_batch == 1 ? 0 : own;
            const uint8_t *pad = call->src_pad == NULL ? NULL : call->src_pad + p * S;
            const int n = src_used[p];
            float scores[2][S];
            for (int hh = 0; hh < H; hh += 2) { /* heads in pairs: weighted_sum2 */
                const int pair = hh + 1 < H;
                for (int e = 0; e <= pair; e++) {
                    const float *q = wide + (int64_t)bt * ldc + (hh + e) * hd;
                    const float *k = call->cross_keys[l] + ((int64_t)cb * H + hh + e) * S * hd;
                    float *score = scores[e];
                    scores_of(q, k, hd, n, hd, score);
                    if (pad != NULL)
                        for (int j = 0; j < n; j++) score[j] = pad[j] ? -INFINITY : score[j];
                    softmax_(score, n);
                    if (last) {
                        float *w = call->weights + (int64_t)bt * S;
                        for (int j = 0; j < n; j++) w[j] += score[j] / (float)H;
                    }
                }
                const float *v = call->cross_values[l] + ((int64_t)cb * H + hh) * S * hd;
                float *out = attn + (int64_t)bt * d + hh * hd;
                if (pair) weighted_sum2(scores[0], v, scores[1], v + S * hd, hd, n, hd, out, out + hd);
                else weighted_sum(scores[0], v, hd, n, hd, out);
            }
        });
        failed |= product(&layer->cross_out, attn, d, M, wide, 0);
        add_rows(x, wide, M, d, layer->cross_out.n_pad);

        /* feed-forward */
        failed |= affine(&layer->up, x, M, h, wide, 1);
        failed |= product(&layer->down, wide, layer->up.n_pad, M, attn, 0);
        if (failed) return 1;
        add_rows(x, attn, M, d, layer->down.n_pad);
    }
    if (affine(model->output, x, M, h, wide, 0)) return 1;
    for (int r = 0; r < M; r++)
        memcpy(call->logits + (int64_t)r * model->vocab, wide + (int64_t)r * model->output->n_pad,
               sizeof(float) * model->vocab);
    return 0;
}

/* ---- the encoder, and the cross-attention keys/values of a new cache ----------------------------- */

/* memory (batch, len, d) of tokens (batch, len), padding (keep == 0) masked as a key. Each source is computed up to
 * its last kept token only, its rows packed after the previous source's: the keys past it are all masked, so its
 * rows come out the same to the bit as over the padded width (a masked key adds an exact 0 to the softmax's sums
 * and to the weighted values), and a batch of sources of unlike lengths costs what they do, not what its longest
 * does. Memory rows past a source's last kept token, which no reader weighs (they are masked in every
 * cross-attention), get the final norm's shift, the output of a row of zeros. Returns nonzero where scratch memory
 * could not be had. */
int encode(const Model *model, int32_t batch, int32_t len, const int64_t *tokens, const uint8_t *keep,
           float *memory) {
    const int d = model->d, H = model->heads, hd = model->head_dim;
    team = model->threads;
    int32_t used[batch > 0 ? batch : 1], start[batch + 1]; /* kept width and first packed row of each source */
    start[0] = 0;
    for (int b = 0; b < batch; b++) {
        int n = len;
        if (keep != NULL)
            while (n > 0 && !keep[(int64_t)b * len + n - 1]) n--;
        used[b] = n;
        start[b + 1] = start[b] + n;
    }
    const int M = start[batch];
    for (int b = 0; b < batch; b++) /* the rows no reader weighs */
        for (int j = used[b]; j < len; j++) memcpy(memory + ((int64_t)b * len + j) * d, model->encoder_shift,
                                                   sizeof(float) * d);
    if (M == 0) return 0;
    int widest = 3 * d > model->d_ff ? 3 * d : model->d_ff;
    float *block = scratch(SCRATCH_CALL, sizeof(float) * ((size_t)M * d * 3 + (size_t)M * pad16(widest)));
    int32_t *source_of = scratch(SCRATCH_SOURCE_ROWS, sizeof(int32_t) * (size_t)M);
    if (block == NULL || source_of == NULL) return 1;
    float *x = block, *h = x + (size_t)M * d, *attn = h + (size_t)M * d, *wide = attn + (size_t)M * d;
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < used[b]; j++) {
            const int64_t r = start[b] + j;
            const float *e = model->embed + tokens[(int64_t)b * len + j] * d, *pos = model->positions + (int64_t)j * d;
            for (int i = 0; i < d; i++) x[r * d + i] = e[i] + pos[i];
            source_of[r] = b;
        }
    int failed = 0;
    for (int l = 0; l < model->n_encoder_layers && !failed; l++) {
        const EncoderLayer *layer = model->encoder_layers + l;
        const int ldq = layer->qkv.n_pad;
        failed |= affine(&layer->qkv, x, M, h, wide, 0);
        PARALLEL_FOR((int64_t)M * len * d * 2, r, M, {
            const int b = source_of[r], n = used[b];
            const uint8_t *kept = keep == NULL ? NULL : keep + (int64_t)b * len;
            const float *row = wide + (int64_t)r * ldq;
            float scores[n];
            for (int hh = 0; hh < H; hh++) {
                float q[hd];
                for (int c = 0; c < hd; c++) q[c] = row[hh * hd + c] * model->query_scale;
                const float *keys = wide + (int64_t)start[b] * ldq + d + hh * hd;
                scores_of(q, keys, ldq, n, hd, scores);
                if (kept != NULL)
                    for (int j = 0; j < n; j++) scores[j] = kept[j] ? scores[j] : -INFINITY;
                softmax_(scores, n);
                weighted_sum(scores, keys + d, ldq, n, hd, attn + (int64_t)r * d + hh * hd);
            }
        });
        /* the rest of the layer a block of rows at a time, so that the feed-forward's wide rows stay in the
         * core's cache (every row is computed alone: the same in any block) */
        for (int r = 0; r < M && !failed; r += PRODUCT_ROWS) {
            const int m = M - r < PRODUCT_ROWS ? M - r : PRODUCT_ROWS;
            float *xr = x + (int64_t)r * d, *ar = attn + (int64_t)r * d;
            failed |= product(&layer->out, ar, d, m, wide, 0);
            add_rows(xr, wide, m, d, layer->out.n_pad);
            failed |= affine(&layer->up, xr, m, h + (int64_t)r * d, wide, 1);
            failed |= product(&layer->down, wide, layer->up.n_pad, m, ar, 0);
            add_rows(xr, ar, m, d, layer->down.n_pad);
        }
    }
    if (failed) return failed;
    normalized(x, M, d, model->encoder_gain, model->encoder_eps, h);
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < used[b]; j++) {
            const float *from = h + (int64_t)(start[b] + j) * d;
            float *to = memory + ((int64_t)b * len + j) * d;
            for (int i = 0; i < d; i++) to[i] = from[i] + model->encoder_shift[i];
        }
    return 0;
}

/* Decoder layer `layer`'s cross-attention keys and values of memory (batch, len, d), each written as
 * (batch, heads, len, head_dim). */
int cross_keys_values(const Model *model, int32_t layer, int32_t batch, int32_t len, const float *memory,
                      float *keys, float *values) {
    const int M = batch * len, d = model->d, H = model->heads, hd = model->head_dim;
    const Affine *a = model->cross_keys_values + layer;
    team = model->threads;
    float *kv = scratch(SCRATCH_KEYS_VALUES, sizeof(float) * (size_t)M * a->n_pad);
    if (kv == NULL) return 1;
    int failed = product(a, memory, d, M, kv, 0);
    for (int b = 0; b < batch && !failed; b++)
        for (int i = 0; i < len; i++)
            for (int hh = 0; hh < H; hh++) {
                const float *row = kv + ((int64_t)b * len + i) * a->n_pad + hh * hd;
                int64_t at = (((int64_t)b * H + hh) * len + i) * hd;
                memcpy(keys + at, row, sizeof(float) * hd);
                memcpy(values + at, row + d, sizeof(float) * hd);
            }
    return failed;
}

/* ---- Beam search's host side -------------------------------------------------------------------
 * What beam.py does between two decoder calls, for the native engine (NativeStep.beam_search, beam_run):
 * in NumPy it is a few dozen calls, each slowed several times by running right after the decoder call
 * has streamed the weights through the caches (measured: best_children took 7x its warm time there). */

/* Row-wise log-softmax of x (rows, n) into out: (x - max) - log(sum exp(x - max)). Each row is
 * computed alone and alike whatever `rows`, so equal logits give equal log-probs in any call; the
 * native engine's beam search and sbs-exact both take theirs from here (Seq2SeqTransformer.log_probs). */
void log_softmax_rows(const float *x, int64_t rows, int32_t n, float *out) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * n;
        float *o = out + r * n, top = -INFINITY;
        for (int j = 0; j < n; j++) top = row[j] > top ? row[j] : top;
        const __m256 shift = _mm256_set1_ps(top);
        __m256 acc = _mm256_setzero_ps();
        int j = 0;
        for (; j + 8 <= n; j += 8) acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), shift)));
        if (j < n) {
            float in[8];
            for (int i = 0; i < 8; i++) in[i] = j + i < n ? row[j + i] - top : -INFINITY; /* exp: 0 */
            acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_loadu_ps(in)));
        }
        const float log_total = logf(lanes_sum(acc));
        for (j = 0; j < n; j++) o[j] = (row[j] - top) - log_total;
    }
}

/* beam.best_children for (queries, slots) scores and (queries, slots, vocab) log-probs: candidate
 * i = slot * vocab + token scores scores[slot] + log_probs[slot][token] (a float32 sum); the first
 * `width` of each query's candidates in descending order, ties to the lower i (a stable sort), into
 * out_scores and out_index (queries, width). width <= slots * vocab; values are finite or -inf. A dead
 * slot (score -inf) scores -inf for every token whatever its log-probs hold (beam_run does not feed
 * it, so they are stale). */
void beam_select(int32_t queries, int32_t slots, int32_t vocab, int32_t width, const float *scores,
                 const float *log_probs, float *out_scores, int64_t *out_index) {
    for (int q = 0; q < queries; q++) {
        float *best = out_scores + (int64_t)q * width;
        int64_t *index = out_index + (int64_t)q * width;
        int count = 0;
        for (int s = 0; s < slots; s++) {
            const float base = scores[(int64_t)q * slots + s];
            const float *row = log_probs + ((int64_t)q * slots + s) * vocab;
            const int dead = base == -INFINITY;  /* its candidates are all -inf: its log-probs are not read */
            if (dead && count == width) continue;
            for (int v = 0; v < vocab; v++) {
                const float c = dead ? -INFINITY : base + row[v];
                if (count == width && !(c > best[width - 1])) continue;  /* an equal one found first stays */
                int at = count < width ? count++ : width - 1;
                while (at > 0 && best[at - 1] < c) {  /* after every kept candidate >= c */
                    best[at] = best[at - 1];
                    index[at] = index[at - 1];
                    at--;
                }
                best[at] = c;
                index[at] = (int64_t)s * vocab + v;
            }
        }
    }
}

/* One row's first `used` floats of each group, from row `from` of slots (or of a staged copy: from < 0,
 * staged row -1 - from, laid out (outer, groups, used)) to row `to`. */
static void copy_row(float *slots, const float *staged, int32_t outer, int32_t batch, int32_t groups,
                     int64_t stride, int64_t used, int64_t from, int64_t to) {
    const int64_t row = groups * stride;
    for (int o = 0; o < outer; o++)
        for (int g = 0; g < groups; g++) {
            const float *source = from >= 0 ? slots + ((int64_t)o * batch + from) * row + g * stride
                                            : staged + ((-1 - from) * outer * groups + (int64_t)o * groups + g) * used;
            memcpy(slots + ((int64_t)o * batch + to) * row + g * stride, source, sizeof(float) * used);
        }
}

/* KVCache.reorder's move: slots (outer, batch, groups, stride) float32; row b becomes old row
 * order[b], copying the first `used` floats of each group. Rows that keep their place are not
 * touched. A row is written once no move still reads it, so each moved row is copied once, straight
 * from its source; only a cycle of moves (rows trading places) stages one of its rows first. Returns 1
 * when scratch memory is short. */
static int move_rows(float *slots, int32_t outer, int32_t batch, int32_t groups, int64_t stride, int64_t used,
                     const int64_t *order) {
    int moved = 0;
    for (int b = 0; b < batch; b++) moved += order[b] != b;
    if (moved == 0) return 0;
    int32_t *readers = scratch(SCRATCH_MOVE_READERS, sizeof(int32_t) * (size_t)batch);
    int64_t *source = scratch(SCRATCH_MOVE_SOURCES, sizeof(int64_t) * (size_t)batch);
    if (readers == NULL || source == NULL) return 1;
    for (int b = 0; b < batch; b++) readers[b] = 0;
    for (int b = 0; b < batch; b++) {
        source[b] = order[b];
        if (order[b] != b) readers[order[b]]++; /* moves still to read row order[b] */
    }
    float *staged = NULL;
    int64_t n_staged = 0;
    for (int left = moved; left > 0;) {
        int progress = 0;
        for (int b = batch - 1; b >= 0; b--) { /* from the end: a beam's rows shift down, b from b - 1 */
            if (source[b] == b || readers[b] > 0) continue; /* in place, or still read by a pending move */
            copy_row(slots, staged, outer, batch, groups, stride, used, source[b], b);
            if (source[b] >= 0) readers[source[b]]--;
            source[b] = b;
            left--;
            progress = 1;
        }
        if (progress || left == 0) continue;
        /* every pending row is read by another pending move: cycles; stage one row and let its readers read that */
        int b = 0;
        while (source[b] == b) b++;
        if (staged == NULL) {
            staged = scratch(SCRATCH_MOVES, sizeof(float) * (size_t)left * outer * groups * used);
            if (staged == NULL) return 1;
        }
        for (int o = 0; o < outer; o++)
            for (int g = 0; g < groups; g++)
                memcpy(staged + (n_staged * outer * groups + (int64_t)o * groups + g) * used,
                       slots + ((int64_t)o * batch + b) * groups * stride + g * stride, sizeof(float) * used);
        for (int r = 0; r < batch; r++)
            if (r != b && source[r] == b) {
                source[r] = -1 - n_staged;
                readers[b]--;
            }
        n_staged++;
    }
    return 0;
}

/* move_rows for the tests (tests/test_native.py): every order, cycles and repeats included. */
int reorder_rows(float *slots, int32_t outer, int32_t batch, int32_t groups, int64_t stride, int64_t used,
                 const int64_t *order) {
    return move_rows(slots, outer, batch, groups, stride, used, order);
}

/* A whole beam search (beam.py's definition) over a cache whose rows are the beam slots of `queries`
 * queries, `width` each, query by query; every live row holds `step` + 1 tokens. The run takes up to
 * `steps` steps, then returns, its state in these arrays, so that Python can check the time limit
 * between runs and read what was found. Each step: the decoder call (one token for each live slot of
 * an active query), the log-softmax, each active query's `width` best children (beam_select), the cache
 * rows and histories moved to their parents', the finished hypotheses recorded, the slots at or below
 * their query's floor (the n_best-th finished score) dropped when `prune`, and the queries that stop
 * (no live slot above the floor, or at their step budget, recording their live slots unfinished)
 * made inactive. A finished query's rows stay in the cache, unread. */
typedef struct {
    int32_t queries, width, n_best, prune, eos;
    int32_t steps;           /* at most this many steps in this run */
    int32_t step;            /* in/out: steps taken since the search began */
    int32_t history_width;   /* columns of history: the largest budget + 1 */
    const int32_t *budgets;  /* (queries): the step at which a query stops, finished or not */
    uint8_t *active;         /* (queries) in/out */
    float *scores;           /* (queries, width) in/out: each slot's score, -INFINITY for a dead slot */
    float *finished_top;     /* (queries, n_best) in/out: each query's best finished scores, descending */
    int32_t *finished_count; /* (queries) in/out: finished hypotheses so far */
    int64_t *calls;          /* (queries) in/out: the steps each query took part in */
    int64_t rows_fed;        /* in/out: rows the decoder calls were fed, summed over the search */
    int64_t *history;        /* (queries * width, history_width) in/out: each slot's tokens, bos first */
    /* scratch: */
    float *logits, *log_probs, *top_scores;  /* (rows, vocab), (rows, vocab), (rows) */
    int64_t *top_index, *parents, *fed, *fed_tokens, *fed_lengths, *moved;  /* (rows) each; moved (width, history_width) */
    float *slots;            /* (2 * n_layers, rows, heads, capacity, head_dim): the cache's keys, values */
    /* out, what this run found, in order (by step, then query, then slot); room for steps * rows (a step finds at
     * most one hypothesis a slot): */
    int64_t n_found, n_found_tokens;
    int64_t *found;          /* (n_found, 4): query, finished (1) or stopped at the budget (0), first token, length */
    float *found_scores;     /* (n_found) */
    int64_t *found_tokens;   /* the hypotheses' tokens, back to back (bos and eos left out) */
} BeamRun;

static float floor_of(const BeamRun *run, int q) {
    return run->finished_count[q] < run->n_best ? -INFINITY : run->finished_top[(int64_t)q * run->n_best + run->n_best - 1];
}

static void found(BeamRun *run, int q, int finished, float score, const int64_t *tokens, int64_t length) {
    int64_t *record = run->found + 4 * run->n_found;
    record[0] = q, record[1] = finished, record[2] = run->n_found_tokens, record[3] = length;
    run->found_scores[run->n_found++] = score;
    memcpy(run->found_tokens + run->n_found_tokens, tokens, sizeof(int64_t) * (size_t)length);
    run->n_found_tokens += length;
    if (!finished) return;
    float *top = run->finished_top + (int64_t)q * run->n_best; /* insert after every equal score */
    int at = run->finished_count[q] < run->n_best ? run->finished_count[q] : run->n_best;
    run->finished_count[q]++;
    if (at == run->n_best && !(score > top[at - 1])) return;
    if (at == run->n_best) at--;
    while (at > 0 && top[at - 1] < score) {
        top[at] = top[at - 1];
        at--;
    }
    top[at] = score;
}

/* A search run's return when the cache's capacity is reached (native.py: CAPACITY_REACHED); else 0, or
 * decoder_step's or move_rows's failure. */
#define CAPACITY_REACHED 4

int beam_run(const Model *model, const Call *call_in, BeamRun *run) {
    const int32_t W = run->width, V = model->vocab, HW = run->history_width;
    const int32_t rows = run->queries * W;
    Call call = *call_in;
    run->n_found = run->n_found_tokens = 0;
    for (int it = 0; it < run->steps; it++) {
        int32_t n_fed = 0;
        for (int q = 0; q < run->queries; q++)
            if (run->active[q])
                for (int s = 0; s < W; s++) {
                    const int64_t r = (int64_t)q * W + s;
                    if (run->scores[r] == -INFINITY) continue;
                    run->fed[n_fed] = r;
                    run->fed_tokens[n_fed] = run->history[r * HW + run->step];
                    run->fed_lengths[n_fed++] = run->step;
                }
        if (n_fed == 0) return 0; /* no active query: the search is over */
        run->rows_fed += n_fed;
        if (run->step + 1 > call.capacity || run->step + 1 >= HW) return CAPACITY_REACHED;
        call.batch = n_fed, call.t_new = 1, call.upto = run->step + 1;
        call.tokens = run->fed_tokens, call.lengths = run->fed_lengths, call.rows = run->fed;
        call.logits = run->logits, call.weights = NULL;
        int failed = decoder_step(model, &call);
        if (failed) return failed;
        for (int32_t b = 0; b < n_fed; b++)
            log_softmax_rows(run->logits + (int64_t)b * V, 1, V, run->log_probs + run->fed[b] * V);
        for (int64_t r = 0; r < rows; r++) run->parents[r] = r;
        for (int q = 0; q < run->queries; q++) {
            if (!run->active[q]) continue;
            const int64_t first = (int64_t)q * W;
            beam_select(1, W, V, W, run->scores + first, run->log_probs + first * V, run->top_scores + first,
                        run->top_index + first);
            for (int s = 0; s < W; s++)
                if (run->top_scores[first + s] != -INFINITY) run->parents[first + s] = first + run->top_index[first + s] / V;
        }
        failed = move_rows(run->slots, 2 * model->n_layers, rows, model->heads, (int64_t)call.capacity * model->head_dim,
                           (int64_t)call.upto * model->head_dim, run->parents);
        if (failed) return failed;
        const int32_t step = ++run->step; /* every live row now holds step + 1 tokens */
        for (int q = 0; q < run->queries; q++) {
            if (!run->active[q]) continue;
            const int64_t first = (int64_t)q * W;
            for (int s = 0; s < W; s++) /* the `step` tokens each slot held */
                memcpy(run->moved + (int64_t)s * HW, run->history + (first + s) * HW, sizeof(int64_t) * (size_t)step);
            for (int s = 0; s < W; s++) {
                const int64_t r = first + s, parent = run->top_index[r] / V, token = run->top_index[r] % V;
                int64_t *h = run->history + r * HW;
                memcpy(h, run->moved + parent * HW, sizeof(int64_t) * (size_t)step);
                h[step] = token;
                const float score = run->top_scores[r];
                if (token == run->eos && score > -INFINITY) found(run, q, 1, score, h + 1, step - 1);
                run->scores[r] = token == run->eos ? -INFINITY : score;
            }
        }
        for (int q = 0; q < run->queries; q++) {
            if (!run->active[q]) continue;
            const int64_t first = (int64_t)q * W;
            const float floor = floor_of(run, q);
            float best_live = -INFINITY;
            for (int s = 0; s < W; s++) {
                if (run->prune && run->scores[first + s] <= floor) run->scores[first + s] = -INFINITY;
                best_live = run->scores[first + s] > best_live ? run->scores[first + s] : best_live;
            }
            run->calls[q]++;
            if (best_live == -INFINITY || best_live <= floor) {
                run->active[q] = 0;
            } else if (step >= run->budgets[q]) {
                for (int s = 0; s < W; s++)
                    if (run->scores[first + s] > -INFINITY)
                        found(run, q, 0, run->scores[first + s], run->history + (first + s) * HW + 1, step);
                run->active[q] = 0;
            }
        }
    }
    return 0;
}

/* ---- Greedy decoding's host side ----------------------------------------------------------------
 * What greedy.py does with a call's logits (settle_lists), for the native engine: the same reason as
 * beam_run's. */

typedef struct {
    const int64_t *drafts;  /* (batch): draft tokens fed after each row's pending token, at most t_new - 1 */
    int64_t *accepted;      /* (batch) out: how many of them agree with the model's argmax */
    int64_t *argmax;        /* (batch, t_new) out: the model's token after each input (the first of equal maxima) */
    float *best_log_probs;  /* (batch, t_new) out: its log-probability, -log(sum exp(logits - max)) */
    int64_t *peaks;         /* (batch) out: the argmax of the last layer's cross-attention after the
                             * accepted run; NULL: not asked (then call->weights may be NULL) */
    int64_t *lengths;       /* (batch) out: the rows' lengths once the accepted run and its next token are kept */
} Greedy;

static int64_t first_max(const float *x, int n) {
    int64_t best = 0;
    for (int j = 1; j < n; j++) best = x[j] > x[best] ? j : best;
    return best;
}

/* One call of greedy decoding, one branch a row: the decoder call, then per row the argmax and its
 * log-probability at every position, the accepted drafts (up to the first disagreement with the argmax),
 * the cross-attention peak after them and the new length. */
int greedy_step(const Model *model, const Call *call, const Greedy *out) {
    int failed = decoder_step(model, call);
    if (failed) return failed;
    const int T = call->t_new, V = model->vocab, S = call->src_len;
    for (int b = 0; b < call->batch; b++) {
        for (int t = 0; t < T; t++) {
            const int64_t r = (int64_t)b * T + t;
            const float *row = call->logits + r * V;
            const int64_t top = first_max(row, V);
            const __m256 shift = _mm256_set1_ps(row[top]);
            __m256 acc = _mm256_setzero_ps();
            int j = 0;
            for (; j + 8 <= V; j += 8) acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(row + j), shift)));
            if (j < V) {
                float in[8];
                for (int i = 0; i < 8; i++) in[i] = j + i < V ? row[j + i] - row[top] : -INFINITY;
                acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_loadu_ps(in)));
            }
            out->argmax[r] = top;
            out->best_log_probs[r] = -logf(lanes_sum(acc));
        }
        int64_t n = 0;
        while (n < out->drafts[b] && call->tokens[(int64_t)b * T + 1 + n] == out->argmax[(int64_t)b * T + n]) n++;
        out->accepted[b] = n;
        out->lengths[b] = call->lengths[b] + n + 1;
        if (out->peaks != NULL) out->peaks[b] = first_max(call->weights + ((int64_t)b * T + n) * S, S);
    }
    return 0;
}

/* Greedy decoding (greedy.py) over a cache of `rows` rows, one query a row, without drafts or with one
 * lookup draft a call (drafting.LookupDrafter, spec-lookup and spec-auto on a CPU): up to `steps` calls,
 * each feeding every active row its pending token and its draft (padded to the call's longest), then
 * keeping the accepted draft tokens and the model's next one (greedy_step): a row stops at eos
 * (finished) or once it has written its budget of tokens. As beam_run, it returns after `steps` calls so
 * that Python can check the time limit. */
typedef struct {
    int32_t rows, bos, eos, pad, generated; /* token ids; `generated`: the origin of a token the model wrote */
    int32_t steps;
    int32_t history_width;   /* columns of tokens and origins: the largest budget + 1 */
    int32_t draft_len;       /* the lookup draft's length at most (0: no drafts) */
    int32_t max_suffix;      /* LookupDrafter.max_suffix */
    int32_t slots;           /* positions a row may fill: the model's, or the cache's capacity when smaller */
    int32_t src_width;       /* columns of sources */
    const int64_t *sources;  /* (rows, src_width): each query's source tokens */
    const int64_t *source_lengths; /* (rows) */
    const int32_t *budgets;  /* (rows) */
    uint8_t *active;         /* (rows) in/out */
    uint8_t *finished;       /* (rows) in/out */
    int64_t *pending;        /* (rows) in/out: each active row's next input token */
    int64_t *lengths;        /* (rows) in/out: the tokens each row's cache holds */
    int64_t *tokens;         /* (rows, history_width) in/out: each row's output so far (eos left out) */
    int64_t *origins;        /* (rows, history_width) in/out: the source position each copied, or `generated` */
    int64_t *written;        /* (rows) in/out: how many */
    double *scores;          /* (rows) in/out: the summed log-probs, in float64 as greedy.py sums them */
    int64_t *calls, *proposed, *accepted_total, *rejections, *emitted; /* (rows) in/out: DecodeStats' counts */
    /* scratch: */
    int64_t *fed, *fed_lengths, *draft_counts, *accepted, *new_lengths, *draft_starts; /* (rows) */
    int64_t *fed_tokens, *argmax;  /* (rows, 1 + draft_len) */
    float *best;             /* (rows, 1 + draft_len) */
    float *logits;           /* (rows * (1 + draft_len), vocab) */
} GreedyRun;

/* LookupDrafter.starts(...)[0]: where row r's draft starts, after the first source place (in source
 * order) that matches the longest suffix of bos + its output, at most max_suffix tokens; -1: no draft. */
static int64_t lookup_start(const GreedyRun *run, int64_t r) {
    const int64_t *src = run->sources + r * run->src_width, *out = run->tokens + r * run->history_width;
    const int64_t n_src = run->source_lengths[r], n = run->written[r]; /* the context: bos, out[0..n-1] */
    if (n == 0) return n_src > 0 ? 0 : -1;
    const int64_t last = out[n - 1], context = n + 1;
    const int64_t reach = run->max_suffix < context ? run->max_suffix : context;
    int64_t longest = 0, start = -1;
    for (int64_t end = 0; end < n_src; end++) {
        if (src[end] != last) continue;
        int64_t k = 1;
        while (k < reach && k <= end && src[end - k] == (n - 1 - k >= 0 ? out[n - 1 - k] : run->bos)) k++;
        if (k > longest) longest = k, start = end + 1 < n_src ? end + 1 : -1;
        else if (k == longest && start < 0 && end + 1 < n_src) start = end + 1;
    }
    return start;
}

int greedy_run(const Model *model, const Call *call_in, GreedyRun *run) {
    Call call = *call_in;
    const int32_t HW = run->history_width;
    for (int it = 0; it < run->steps; it++) {
        int32_t n_fed = 0;
        int64_t longest = 0, furthest = 0, depth = 0;
        for (int r = 0; r < run->rows; r++)
            if (run->active[r]) furthest = run->written[r] > furthest ? run->written[r] : furthest;
        for (int r = 0; r < run->rows; r++) {
            if (!run->active[r]) continue;
            int64_t count = 0, begin = -1;
            if (run->draft_len > 0 && (begin = lookup_start(run, r)) >= 0) { /* greedy.fit_drafts' room */
                const int64_t own = run->budgets[r] - run->written[r] - 1, shared = run->slots - furthest - 1;
                int64_t room = own > 0 ? own : 0;
                room = shared < room ? shared : room;
                count = run->source_lengths[r] - begin < run->draft_len ? run->source_lengths[r] - begin : run->draft_len;
                count = room > 0 ? (count < room ? count : room) : 0;
            }
            run->fed[n_fed] = r;
            run->draft_starts[n_fed] = begin;
            run->draft_counts[n_fed] = count;
            run->fed_lengths[n_fed++] = run->lengths[r];
            longest = run->lengths[r] > longest ? run->lengths[r] : longest;
            depth = count > depth ? count : depth;
        }
        if (n_fed == 0) return 0;
        const int32_t T = (int32_t)depth + 1;
        if (longest + T > call.capacity) return CAPACITY_REACHED;
        for (int32_t b = 0; b < n_fed; b++) { /* pending token, draft, padding */
            const int64_t r = run->fed[b], *src = run->sources + r * run->src_width;
            int64_t *fed = run->fed_tokens + (int64_t)b * T;
            fed[0] = run->pending[r];
            for (int t = 1; t < T; t++) fed[t] = t <= run->draft_counts[b] ? src[run->draft_starts[b] + t - 1] : run->pad;
        }
        call.batch = n_fed, call.t_new = T, call.upto = (int32_t)longest + T;
        call.tokens = run->fed_tokens, call.lengths = run->fed_lengths, call.rows = run->fed;
        call.logits = run->logits, call.weights = NULL;
        Greedy out = {run->draft_counts, run->accepted, run->argmax, run->best, NULL, run->new_lengths};
        int failed = greedy_step(model, &call, &out);
        if (failed) return failed;
        for (int32_t b = 0; b < n_fed; b++) {
            const int64_t r = run->fed[b], n = run->accepted[b], drafted = run->draft_counts[b];
            const int64_t *argmax = run->argmax + (int64_t)b * T;
            const float *best = run->best + (int64_t)b * T;
            double call_score = 0.0; /* greedy.py: score += sum(this call's log-probs) */
            for (int64_t t = 0; t <= n; t++) call_score += (double)best[t];
            run->scores[r] += call_score;
            run->calls[r]++;
            run->proposed[r] += drafted;
            run->accepted_total[r] += n;
            run->rejections[r] += drafted > 0 && n < drafted;
            run->emitted[r] += n + 1;
            run->lengths[r] = run->new_lengths[b];
            const int64_t kept = argmax[n] == run->eos ? n : n + 1; /* eos is not written */
            for (int64_t t = 0; t < kept; t++) {
                run->tokens[r * HW + run->written[r]] = argmax[t];
                run->origins[r * HW + run->written[r]++] = t < n ? run->draft_starts[b] + t : run->generated;
            }
            if (argmax[n] == run->eos) {
                run->finished[r] = 1;
                run->active[r] = 0;
                continue;
            }
            run->pending[r] = argmax[n];
            if (run->written[r] >= run->budgets[r]) run->active[r] = 0;
        }
    }
    return 0;
}
