// The one error body every endpoint returns: {"error":{message,type,param,code}}.

import { Type } from 'typebox'
import { ERROR_TABLE } from '../errors.ts'

export const ErrorBody = Type.Object({
  error: Type.Object({
    message: Type.String(),
    type: Type.String({ description: 'authentication_error, invalid_request_error, not_found_error, rate_limit_error, permission_error or server_error' }),
    param: Type.Union([Type.String(), Type.Null()], { description: 'The request field at fault, e.g. temperature or messages[0].role; null when no single field is.' }),
    code: Type.Enum(Object.keys(ERROR_TABLE)),
  }),
}, { description: 'OpenAI-style error body' })

/** Response schemas to attach to every route so /docs shows the error shape. */
export const errorResponses = {
  '4xx': ErrorBody,
  '5xx': ErrorBody,
}
