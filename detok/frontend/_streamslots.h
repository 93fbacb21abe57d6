/* A RequestStream's attributes read and written at their slots' offsets, for push_rows
 * (_directrows.c, _typedrows.c; the extension detok.frontend._chunkpush).
 *
 * Why: push_rows reads about ten attributes of each row's stream; through PyObject_GetAttr each is
 * a type lookup, a member descriptor's call and a refcount, ≈1 µs of a chunk's frontend CPU under
 * load (perf: PyMember_GetOne, PyObject_GetAttr, _PyType_Lookup). The stream type's `__slots__`
 * are member descriptors at fixed offsets: bound once per type (and again if the type changes:
 * its version tag), a read is one load. Anything else (a name that is not a writable object slot
 * of the type, an unset slot, an object of another type) goes through PyObject_GetAttr /
 * PyObject_SetAttr, with their results and errors. */
#ifndef DETOK_STREAMSLOTS_H
#define DETOK_STREAMSLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum {
    SL_PUSH_QUEUED, SL_FINISH, SL_TYPED, SL_CHUNKS, SL_LOGPROBS, SL_RECEIVED, SL_PUSHER, SL_WAITER, SL_TOKENS,
    SL_PUSH_ERROR, SL_NEXT_TOKEN, N_STREAM_SLOTS
} StreamSlot;

/* the bound type (NULL: none) and each name's offset in it (-1: through getattr) */
extern PyTypeObject *detok_slots_type;
extern Py_ssize_t detok_slot_offsets[N_STREAM_SLOTS];
extern PyObject *detok_slot_names[N_STREAM_SLOTS];

int detok_streamslots_init(void);
/* bind `type`'s offsets (a no-op when it is bound and unchanged): 0, or -1 with an exception set */
int detok_streamslots_bind(PyTypeObject *type);

static inline PyObject **detok_slot_at(PyObject *stream, StreamSlot which) {
    Py_ssize_t off = Py_TYPE(stream) == detok_slots_type ? detok_slot_offsets[which] : -1;
    return off >= 0 ? (PyObject **)((char *)stream + off) : NULL;
}

/* stream.<which>: a new reference, or NULL with an exception set (as PyObject_GetAttr) */
static inline PyObject *detok_stream_get(PyObject *stream, StreamSlot which) {
    PyObject **at = detok_slot_at(stream, which);
    if (at != NULL && *at != NULL) return Py_NewRef(*at);
    return PyObject_GetAttr(stream, detok_slot_names[which]); /* (an unset slot: its AttributeError) */
}

/* stream.<which> = value: 0, or -1 with an exception set (as PyObject_SetAttr) */
static inline int detok_stream_set(PyObject *stream, StreamSlot which, PyObject *value) {
    PyObject **at = detok_slot_at(stream, which);
    if (at == NULL) return PyObject_SetAttr(stream, detok_slot_names[which], value);
    PyObject *old = *at;
    *at = Py_NewRef(value);
    Py_XDECREF(old);
    return 0;
}

/* where stream.<which> is, for a prefetch: its value's address, or NULL (unset, not bound) */
static inline PyObject *detok_stream_peek(PyObject *stream, StreamSlot which) {
    PyObject **at = detok_slot_at(stream, which);
    return at != NULL ? *at : NULL;
}

#endif
