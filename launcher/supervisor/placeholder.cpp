namespace dtrain { int placeholder_supervisor = 0; }
