/* RequestStream's slot offsets for push_rows (see _streamslots.h). */
#include "_streamslots.h"
#include <structmember.h>

PyTypeObject *detok_slots_type = NULL;
Py_ssize_t detok_slot_offsets[N_STREAM_SLOTS];
PyObject *detok_slot_names[N_STREAM_SLOTS];
unsigned int detok_slots_tag = 0;

int detok_streamslots_init(void) {
    static const char *names[N_STREAM_SLOTS] = {
        [SL_PUSH_QUEUED] = "_push_queued", [SL_FINISH] = "finish", [SL_TYPED] = "_typed", [SL_CHUNKS] = "_chunks",
        [SL_LOGPROBS] = "_logprobs", [SL_RECEIVED] = "_received", [SL_PUSHER] = "_pusher", [SL_WAITER] = "_waiter",
        [SL_TOKENS] = "_tokens", [SL_PUSH_ERROR] = "_push_error", [SL_NEXT_TOKEN] = "_next_token",
    };
    for (int i = 0; i < N_STREAM_SLOTS; i++)
        if ((detok_slot_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return -1;
    return 0;
}

int detok_streamslots_bind(PyTypeObject *type) {
    if (type == detok_slots_type && type->tp_version_tag != 0 && type->tp_version_tag == detok_slots_tag) return 0;
    detok_slots_type = NULL;
    for (int i = 0; i < N_STREAM_SLOTS; i++) {
        /* (borrowed; looking it up gives the type a version tag if it has none) */
        PyObject *d = _PyType_Lookup(type, detok_slot_names[i]);
        detok_slot_offsets[i] = -1;
        if (d == NULL || Py_TYPE(d) != &PyMemberDescr_Type) continue; /* (a property, a class attribute, none) */
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        /* a writable object slot of this type or a base (the layout is inherited) */
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY) && m->offset >= (Py_ssize_t)sizeof(PyObject)
            && m->offset + (Py_ssize_t)sizeof(PyObject *) <= type->tp_basicsize
            && PyType_IsSubtype(type, PyDescr_TYPE(d)))
            detok_slot_offsets[i] = m->offset;
    }
    if (type->tp_version_tag == 0) return 0; /* (no tag to notice a change by: every read through getattr) */
    detok_slots_tag = type->tp_version_tag;
    detok_slots_type = type;
    return 0;
}
