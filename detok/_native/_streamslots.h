/* A RequestStream's attributes read and written at their slots' offsets, for push_rows
 * (_directrows.c, _typedrows.c; the extension detok.frontend._chunkpush).
 *
 * Why: push_rows reads about ten attributes of each row's stream; through PyObject_GetAttr each is
 * a type lookup and a member descriptor's call (perf, 512 users: PyMember_GetOne alone ≈4% of the
 * frontend's CPU). The stream type's `__slots__` are member descriptors at fixed offsets: bound
 * once per type, a read is one load. A change to the type (its version tag: set anew by any class
 * attribute assignment, here or in a base) makes every read go through getattr until the next
 * bind, even within a pass. Anything else (a name that is not a writable object slot of the type,
 * an unset slot, an object of another type) goes through PyObject_GetAttr / PyObject_SetAttr, with
 * their results and errors. */
#ifndef DETOK_STREAMSLOTS_H
#define DETOK_STREAMSLOTS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum {
    SL_PUSH_QUEUED, SL_FINISH, SL_TYPED, SL_CHUNKS, SL_LOGPROBS, SL_RECEIVED, SL_PUSHER, SL_WAITER, SL_TOKENS,
    SL_PUSH_ERROR, SL_NEXT_TOKEN, N_STREAM_SLOTS
} StreamSlot;

/* the bound type (NULL: none), its version tag when bound, and each name's offset in it (-1: through getattr) */
extern PyTypeObject *detok_slots_type;
extern unsigned int detok_slots_tag;
extern Py_ssize_t detok_slot_offsets[N_STREAM_SLOTS];
extern PyObject *detok_slot_names[N_STREAM_SLOTS];

int detok_streamslots_init(void);
/* bind `type`'s offsets (a no-op when it is bound and unchanged): 0, or -1 with an exception set */
int detok_streamslots_bind(PyTypeObject *type);

static inline PyObject **detok_slot_at(PyObject *stream, StreamSlot which) {
    PyTypeObject *type = Py_TYPE(stream);
    Py_ssize_t off = type == detok_slots_type && type->tp_version_tag == detok_slots_tag ? detok_slot_offsets[which] : -1;
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

#endif
