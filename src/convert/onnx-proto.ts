// The subset of ONNX's protobuf schema (onnx/onnx.proto, IR version 8+) that
// the model builder writes and the loader's validation reads. Field numbers
// are the spec's; protobufjs does the wire encoding.
import protobuf from 'protobufjs'

const SCHEMA = `
syntax = "proto2";
package onnx;

message AttributeProto {
  enum AttributeType { UNDEFINED = 0; FLOAT = 1; INT = 2; STRING = 3; TENSOR = 4; GRAPH = 5;
    FLOATS = 6; INTS = 7; STRINGS = 8; TENSORS = 9; GRAPHS = 10; }
  optional string name = 1;
  optional AttributeType type = 20;
  optional float f = 2;
  optional int64 i = 3;
  optional bytes s = 4;
  optional TensorProto t = 5;
  repeated float floats = 7;
  repeated int64 ints = 8;
  repeated bytes strings = 9;
}

message ValueInfoProto {
  optional string name = 1;
  optional TypeProto type = 2;
}

message NodeProto {
  repeated string input = 1;
  repeated string output = 2;
  optional string name = 3;
  optional string op_type = 4;
  optional string domain = 7;
  repeated AttributeProto attribute = 5;
}

message StringStringEntryProto {
  optional string key = 1;
  optional string value = 2;
}

message TensorProto {
  enum DataLocation { DEFAULT = 0; EXTERNAL = 1; }
  repeated int64 dims = 1;
  optional int32 data_type = 2;
  optional string name = 8;
  optional bytes raw_data = 9;
  repeated StringStringEntryProto external_data = 13;
  optional DataLocation data_location = 14;
}

message TensorShapeProto {
  message Dimension {
    oneof value {
      int64 dim_value = 1;
      string dim_param = 2;
    }
  }
  repeated Dimension dim = 1;
}

message TypeProto {
  message Tensor {
    optional int32 elem_type = 1;
    optional TensorShapeProto shape = 2;
  }
  oneof value {
    Tensor tensor_type = 1;
  }
}

message OperatorSetIdProto {
  optional string domain = 1;
  optional int64 version = 2;
}

message GraphProto {
  repeated NodeProto node = 1;
  optional string name = 2;
  repeated TensorProto initializer = 5;
  repeated ValueInfoProto input = 11;
  repeated ValueInfoProto output = 12;
}

message ModelProto {
  optional int64 ir_version = 1;
  repeated OperatorSetIdProto opset_import = 8;
  optional string producer_name = 2;
  optional string producer_version = 3;
  optional GraphProto graph = 7;
  repeated StringStringEntryProto metadata_props = 14;
}
`

/** ONNX TensorProto.DataType values used by chatd. */
export const DataType = {
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  INT32: 6,
  INT64: 7,
  BOOL: 9,
  FLOAT16: 10,
} as const

export const AttributeType = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, FLOATS: 6, INTS: 7 } as const

const root = protobuf.parse(SCHEMA, { keepCase: true }).root
export const ModelProto = root.lookupType('onnx.ModelProto')

export interface TensorInit {
  name: string
  dims: number[]
  data_type: number
  raw_data?: Uint8Array
  external_data?: Array<{ key: string; value: string }>
  data_location?: number
}

export interface AttributeInit {
  name: string
  type: number
  f?: number
  i?: number
  s?: Uint8Array
  t?: TensorInit
  floats?: number[]
  ints?: number[]
}

export interface NodeInit {
  op_type: string
  domain?: string
  name: string
  input: string[]
  output: string[]
  attribute: AttributeInit[]
}

export interface ValueInfoInit {
  name: string
  type: { tensor_type: { elem_type: number; shape: { dim: Array<{ dim_value?: number; dim_param?: string }> } } }
}

export interface ModelInit {
  ir_version: number
  producer_name: string
  producer_version: string
  opset_import: Array<{ domain: string; version: number }>
  graph: {
    name: string
    node: NodeInit[]
    initializer: TensorInit[]
    input: ValueInfoInit[]
    output: ValueInfoInit[]
  }
  metadata_props: Array<{ key: string; value: string }>
}

export function encodeModel (model: ModelInit): Uint8Array {
  const message = ModelProto.fromObject(model)
  return ModelProto.encode(message).finish()
}

/** Decodes a model file's protobuf (used by the loader to report corrupt files clearly). */
export function decodeModel (bytes: Uint8Array): ModelInit {
  return ModelProto.toObject(ModelProto.decode(bytes), { longs: Number, defaults: false }) as ModelInit
}
