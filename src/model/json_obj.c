/* json_obj.c: a JSON object out of a buffer, duplicate keys refused, the
 * syntax error located by line and column (json_obj.h). */
#include "model/json_obj.h"
#include "util/errmsg.h"

json_t *mt_json_object(const char *json, size_t len, const char *what, char *err,
                       size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        mt_set_err(err, errlen, "%s: JSON syntax error at line %d, column %d: %s", what, je.line,
                   je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        mt_set_err(err, errlen, "%s: not a JSON object", what);
        json_decref(root);
        return NULL;
    }
    return root;
}
