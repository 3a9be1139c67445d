/*
 * The record walks of compacted topics, in C (gateway/formats/compaction.py has the pure-Python twin
 * that gives the same results, and says what each function does). Built by setuptools as an optional
 * extension: without a compiler the package works on the Python walks.
 *
 * Every function takes the record bytes of one batch after its 61-byte header, decompressed, and the
 * batch's record count; a malformed record raises gateway.errors.CorruptMessage, as the Python walks
 * do. No Python object is made per record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* -- records ---------------------------------------------------------------------------------- */

static int zigzag(const uint8_t *b, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end || shift > 63)
            return -1;
        uint8_t c = b[p++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            break;
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

typedef struct {
    Py_ssize_t start;    /* its length varint */
    Py_ssize_t ts_at;    /* its timestamp delta */
    Py_ssize_t off_at;   /* its offset delta (what follows the timestamp delta) */
    Py_ssize_t key_at;   /* its key's length (what follows the offset delta) */
    Py_ssize_t end;
    int64_t ts_delta;
    int64_t off_delta;
    Py_ssize_t key;      /* where the key's bytes start */
    int64_t key_len;     /* -1: null */
    int tombstone;       /* a null value */
} rec_t;

/* The record at *pos (its fields down to the value's length when `value`), *pos moved past it. */
static int next_record(const uint8_t *b, Py_ssize_t size, Py_ssize_t *pos, rec_t *r, int value)
{
    int64_t len, vlen;
    Py_ssize_t p;
    r->start = *pos;
    p = *pos;
    if (zigzag(b, size, &p, &len) < 0 || len < 0 || len > size - p)
        return -1;
    r->end = p + len;
    if (p >= r->end)
        return -1;
    p++; /* attributes */
    r->ts_at = p;
    if (zigzag(b, r->end, &p, &r->ts_delta) < 0)
        return -1;
    r->off_at = p;
    if (zigzag(b, r->end, &p, &r->off_delta) < 0)
        return -1;
    r->key_at = p;
    if (zigzag(b, r->end, &p, &r->key_len) < 0)
        return -1;
    r->key = p;
    if (r->key_len >= 0) {
        if (r->key_len > r->end - p)
            return -1;
        p += r->key_len;
    }
    r->tombstone = 0;
    if (value) {
        if (zigzag(b, r->end, &p, &vlen) < 0 || vlen > r->end - p)
            return -1;
        r->tombstone = vlen < 0;
    }
    *pos = r->end;
    return 0;
}

static PyObject *CorruptMessage; /* gateway.errors.CorruptMessage */

static PyObject *corrupt(void)
{
    PyErr_SetString(CorruptMessage, "record runs past the batch");
    return NULL;
}

static PyObject *keyless(PyObject *self, PyObject *args)
{
    Py_buffer body;
    Py_ssize_t count, pos = 0, i;
    rec_t r;
    if (!PyArg_ParseTuple(args, "y*n:keyless", &body, &count))
        return NULL;
    for (i = 0; i < count; i++) {
        if (next_record(body.buf, body.len, &pos, &r, 0) < 0) {
            PyBuffer_Release(&body);
            return corrupt();
        }
        if (r.key_len < 0)
            break;
    }
    PyBuffer_Release(&body);
    return PyLong_FromSsize_t(i < count ? i : -1);
}

/* -- SipHash with 128 bits out (Aumasson and Bernstein's reference), the offset map's digest ------ */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                     \
    do {                                                                                             \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                    \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                       \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                       \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                    \
    } while (0)

static uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

/* SipHash-c-d with 128 bits out: 2-4 is the reference's, and its test vectors check this code; the
 * offset map takes 1-3 (as CPython's and Rust's hash tables do for short keys): a keyed function
 * with a random key per pass, so no one can make two keys collide without knowing it. */
static inline void siphash_cd(const uint64_t k[2], const uint8_t *in, size_t n, uint64_t out[2], int c, int d)
{
    uint64_t v0 = 0x736f6d6570736575ULL ^ k[0], v1 = 0x646f72616e646f6dULL ^ k[1] ^ 0xee;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k[0], v3 = 0x7465646279746573ULL ^ k[1];
    uint64_t m, last = (uint64_t)n << 56;
    const uint8_t *end = in + (n - n % 8);
    for (; in != end; in += 8) {
        m = le64(in);
        v3 ^= m;
        for (int i = 0; i < c; i++)
            SIPROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < n % 8; i++)
        last |= (uint64_t)in[i] << (8 * i);
    v3 ^= last;
    for (int i = 0; i < c; i++)
        SIPROUND;
    v0 ^= last;
    v2 ^= 0xee;
    for (int i = 0; i < d; i++)
        SIPROUND;
    out[0] = v0 ^ v1 ^ v2 ^ v3;
    v1 ^= 0xdd;
    for (int i = 0; i < d; i++)
        SIPROUND;
    out[1] = v0 ^ v1 ^ v2 ^ v3;
}

static void siphash128(const uint64_t k[2], const uint8_t *in, size_t n, uint64_t out[2])
{
    siphash_cd(k, in, n, out, 2, 4);
}

static void map_digest(const uint64_t k[2], const uint8_t *in, size_t n, uint64_t out[2])
{
    siphash_cd(k, in, n, out, 1, 3);
}

static PyObject *siphash(PyObject *self, PyObject *args)
{
    Py_buffer key, data;
    uint64_t k[2], out[2];
    uint8_t digest[16];
    if (!PyArg_ParseTuple(args, "y*y*:siphash128", &key, &data))
        return NULL;
    if (key.len != 16) {
        PyBuffer_Release(&key);
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "the key is 16 bytes");
        return NULL;
    }
    k[0] = le64(key.buf);
    k[1] = le64((const uint8_t *)key.buf + 8);
    siphash128(k, data.buf, (size_t)data.len, out);
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    for (int i = 0; i < 8; i++) {
        digest[i] = (uint8_t)(out[0] >> (8 * i));
        digest[8 + i] = (uint8_t)(out[1] >> (8 * i));
    }
    return PyBytes_FromStringAndSize((const char *)digest, 16);
}

/* -- the offset map: key digest -> latest offset, open addressing (linear probing) --------------- */

typedef struct {
    uint64_t a, b;
    int64_t offset; /* -1: free */
} slot_t;

typedef struct {
    PyObject_HEAD
    slot_t *slots;
    Py_ssize_t nslots, used, capacity;
    Py_ssize_t max_slots; /* the table starts small and doubles up to this */
    uint64_t k[2];
} OffsetMap;

#define MAP_FIRST_SLOTS 4096

/* Free slots; NULL when out of memory (the caller sets the error). */
static slot_t *new_slots(Py_ssize_t n)
{
    slot_t *slots = PyMem_RawMalloc((size_t)n * sizeof(slot_t)); /* traced by tracemalloc */
    if (slots != NULL)
        for (Py_ssize_t i = 0; i < n; i++)
            slots[i].offset = -1;
    return slots;
}

static int map_init(OffsetMap *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"capacity", "seed", NULL};
    Py_ssize_t capacity;
    Py_buffer seed;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "ny*:OffsetMap", kwlist, &capacity, &seed))
        return -1;
    if (seed.len != 16 || capacity < 1 || capacity > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(slot_t)) {
        PyBuffer_Release(&seed);
        PyErr_SetString(PyExc_ValueError, "a capacity of at least 1 and a seed of 16 bytes");
        return -1;
    }
    self->k[0] = le64(seed.buf);
    self->k[1] = le64((const uint8_t *)seed.buf + 8);
    PyBuffer_Release(&seed);
    PyMem_RawFree(self->slots);
    self->capacity = capacity;
    self->max_slots = capacity + capacity / 3 + 1; /* at most 3/4 full */
    self->nslots = self->max_slots < MAP_FIRST_SLOTS ? self->max_slots : MAP_FIRST_SLOTS;
    self->used = 0;
    self->slots = new_slots(self->nslots);
    if (self->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void map_dealloc(OffsetMap *self)
{
    PyMem_RawFree(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static slot_t *find(slot_t *slots, Py_ssize_t nslots, const uint64_t d[2])
{
    Py_ssize_t i = (Py_ssize_t)(((unsigned __int128)d[0] * (uint64_t)nslots) >> 64);
    for (;;) {
        slot_t *s = &slots[i];
        if (s->offset < 0 || (s->a == d[0] && s->b == d[1]))
            return s;
        if (++i == nslots)
            i = 0;
    }
}

static slot_t *map_slot(OffsetMap *m, const uint8_t *key, Py_ssize_t n, uint64_t d[2])
{
    map_digest(m->k, key, (size_t)n, d);
    return find(m->slots, m->nslots, d);
}

/* Twice the slots (at most max_slots), every key moved over: a map of few keys stays small and in
 * the CPU's caches. */
static int grow(OffsetMap *m)
{
    Py_ssize_t n = m->nslots * 2 < m->max_slots ? m->nslots * 2 : m->max_slots;
    slot_t *slots = new_slots(n);
    if (slots == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < m->nslots; i++)
        if (m->slots[i].offset >= 0) {
            uint64_t d[2] = {m->slots[i].a, m->slots[i].b};
            *find(slots, n, d) = m->slots[i];
        }
    PyMem_RawFree(m->slots);
    m->slots = slots;
    m->nslots = n;
    return 0;
}

enum { ADD_OK, ADD_CORRUPT, ADD_FULL, ADD_NOMEM };

/* The records of one body into the map (no Python object is touched). */
static int map_add_body(OffsetMap *self, const uint8_t *b, Py_ssize_t size, Py_ssize_t count, long long base)
{
    Py_ssize_t pos = 0;
    uint64_t d[2];
    rec_t r;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (next_record(b, size, &pos, &r, 1) < 0)
            return ADD_CORRUPT;
        if (r.key_len < 0)
            continue;
        if ((self->used + 1) * 4 > self->nslots * 3 && self->nslots < self->max_slots && grow(self) < 0)
            return ADD_NOMEM;
        slot_t *s = map_slot(self, b + r.key, (Py_ssize_t)r.key_len, d);
        if (s->offset < 0) {
            if (self->used == self->capacity)
                return ADD_FULL;
            s->a = d[0];
            s->b = d[1];
            self->used++;
        }
        s->offset = base + r.off_delta;
    }
    return ADD_OK;
}

static PyObject *map_add(OffsetMap *self, PyObject *args)
{
    Py_buffer body;
    Py_ssize_t count;
    long long base;
    int rc;
    if (!PyArg_ParseTuple(args, "y*nL:add", &body, &count, &base))
        return NULL;
    rc = map_add_body(self, body.buf, body.len, count, base);
    PyBuffer_Release(&body);
    switch (rc) {
    case ADD_CORRUPT:
        return corrupt();
    case ADD_FULL:
        PyErr_SetString(PyExc_OverflowError, "the offset map is full");
        return NULL;
    case ADD_NOMEM:
        return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static PyObject *map_survivors(OffsetMap *self, PyObject *unused)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, self->used * 8);
    if (out == NULL)
        return NULL;
    int64_t *v = (int64_t *)PyBytes_AS_STRING(out);
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < self->nslots; i++)
        if (self->slots[i].offset >= 0)
            v[n++] = self->slots[i].offset;
    qsort(v, (size_t)n, 8, cmp_i64);
    return out;
}

static Py_ssize_t map_len(OffsetMap *self)
{
    return self->used;
}

static PyTypeObject OffsetMapType; /* below */

/* -- filter: the records of a batch that stay, as a new record body ---------------------------- */

static int has_offset(const int64_t *v, Py_ssize_t n, int64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == x;
}

static Py_ssize_t put_zigzag(uint8_t *out, int64_t value)
{
    uint64_t n = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t i = 0;
    while (n > 0x7F) {
        out[i++] = (uint8_t)(n & 0x7F) | 0x80;
        n >>= 7;
    }
    out[i++] = (uint8_t)n;
    return i;
}

static PyObject *filter_records(PyObject *self, PyObject *args)
{
    Py_buffer body, keep = {0};
    Py_ssize_t count, pos = 0, at = 0, kept = 0, tombstones = 0;
    long long base, ts_shift, off_shift;
    int drop_tombstones, mode;
    int64_t max_delta = INT64_MIN;
    PyObject *keep_obj, *out = NULL, *res = NULL;
    OffsetMap *m = NULL;
    uint64_t d[2];
    rec_t r;
    if (!PyArg_ParseTuple(args, "y*nLOpLL:filter_records", &body, &count, &base, &keep_obj, &drop_tombstones,
                          &ts_shift, &off_shift))
        return NULL;
    enum { ALL, BY_OFFSETS, BY_MAP };
    if (keep_obj == Py_None) {
        mode = ALL;
    } else if (PyObject_TypeCheck(keep_obj, &OffsetMapType)) {
        mode = BY_MAP;
        m = (OffsetMap *)keep_obj;
    } else {
        mode = BY_OFFSETS;
        if (PyObject_GetBuffer(keep_obj, &keep, PyBUF_SIMPLE) < 0)
            goto done;
    }
    /* each re-encoded delta may grow by up to 10 bytes, and the length's varint by 5 */
    out = PyBytes_FromStringAndSize(NULL, body.len + (ts_shift || off_shift ? count * 25 : 0));
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *b = body.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (next_record(b, body.len, &pos, &r, 1) < 0) {
            corrupt();
            goto done;
        }
        int stays = 1;
        if (mode == BY_OFFSETS)
            stays = has_offset(keep.buf, keep.len / 8, base + r.off_delta);
        else if (mode == BY_MAP && r.key_len < 0)
            stays = 0;
        else if (mode == BY_MAP) {
            slot_t *s = map_slot(m, b + r.key, (Py_ssize_t)r.key_len, d);
            stays = s->offset < 0 || s->offset <= base + r.off_delta;
        }
        if (!stays || (r.tombstone && drop_tombstones))
            continue;
        kept++;
        tombstones += r.tombstone;
        if (r.ts_delta > max_delta)
            max_delta = r.ts_delta;
        if (!ts_shift && !off_shift) {
            memcpy(o + at, b + r.start, (size_t)(r.end - r.start));
            at += r.end - r.start;
        } else {
            uint8_t deltas[20];
            Py_ssize_t n = put_zigzag(deltas, r.ts_delta + ts_shift);
            n += put_zigzag(deltas + n, r.off_delta + off_shift);
            at += put_zigzag(o + at, 1 + n + (r.end - r.key_at));
            o[at++] = b[r.ts_at - 1]; /* the attributes */
            memcpy(o + at, deltas, (size_t)n);
            at += n;
            memcpy(o + at, b + r.key_at, (size_t)(r.end - r.key_at));
            at += r.end - r.key_at;
        }
    }
    if (_PyBytes_Resize(&out, at) < 0)
        goto done; /* it freed `out` */
    res = Py_BuildValue("(NnnL)", out, kept, tombstones, (long long)(kept ? max_delta : 0));
    out = NULL;
done:
    Py_XDECREF(out);
    PyBuffer_Release(&body);
    if (keep.buf)
        PyBuffer_Release(&keep);
    return res;
}

/* -- the module ------------------------------------------------------------------------------- */

static PyMethodDef map_methods[] = {
    {"add", (PyCFunction)map_add, METH_VARARGS, "Map every keyed record of a record body to its offset."},
    {"survivors", (PyCFunction)map_survivors, METH_NOARGS, "The map's offsets, sorted, as native int64s."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods map_as_sequence = {.sq_length = (lenfunc)map_len};

static PyTypeObject OffsetMapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gateway.formats._speedups.OffsetMap",
    .tp_basicsize = sizeof(OffsetMap),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Key digest -> latest offset: 24 bytes a slot, at most 3/4 full, growing up to its capacity.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)map_init,
    .tp_dealloc = (destructor)map_dealloc,
    .tp_methods = map_methods,
    .tp_as_sequence = &map_as_sequence,
};

static PyMethodDef methods[] = {
    {"keyless", keyless, METH_VARARGS, "The index of the first record without a key, -1 when none."},
    {"filter_records", filter_records, METH_VARARGS, "The records that stay: (body, kept, tombstones, max timestamp delta)."},
    {"siphash128", siphash, METH_VARARGS, "SipHash-2-4, 128 bits out (the offset map's is SipHash-1-3)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void)
{
    PyObject *m, *errors;
    if (PyType_Ready(&OffsetMapType) < 0)
        return NULL;
    errors = PyImport_ImportModule("gateway.errors");
    if (errors == NULL)
        return NULL;
    CorruptMessage = PyObject_GetAttrString(errors, "CorruptMessage");
    Py_DECREF(errors);
    if (CorruptMessage == NULL)
        return NULL;
    m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&OffsetMapType);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&OffsetMapType) < 0) {
        Py_DECREF(&OffsetMapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
